#include "tessera/nn/init.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/core/backend.h"
#include "tessera/core/empty.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"

namespace tessera::nn {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t mix_key(std::initializer_list<uint64_t> parts) {
  uint64_t h = 0;
  for (uint64_t p : parts) h = splitmix64(h ^ p);
  return h;
}

uint64_t param_key(uint64_t init_seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a, 64-bit
  for (char c : name) {
    h ^= uint64_t(static_cast<unsigned char>(c));
    h *= 0x100000001B3ull;
  }
  return mix_key({init_seed, h});
}

namespace {

// The split dim's segments (the whole dim when meta names none), each checked to split evenly
// over `size` ranks; `full_length` is the full tensor's length along the dim.
std::vector<int64_t> split_segments(const ParamMeta& meta, int64_t full_length, int size,
                                    int64_t dim, const std::string& what,
                                    const std::string& shape) {
  std::vector<int64_t> segments = meta.segments;
  if (segments.empty()) {
    TESSERA_CHECK(full_length % size == 0, "shard_of: '", what, "' ", shape, " dim ", dim, " (",
                  full_length, ") does not split evenly over ", size, " ranks");
    return {full_length};
  }
  for (int64_t s : segments)
    TESSERA_CHECK(s > 0 && s % size == 0, "shard_of: '", what, "' has a segment of ", s,
                  " along dim ", dim, ", which does not split evenly over ", size, " ranks");
  return segments;
}

void check_split(int rank, int size, const ParamMeta& meta, int64_t dims, const std::string& what,
                 const std::string& shape) {
  TESSERA_CHECK(size >= 1 && rank >= 0 && rank < size, "shard_of: rank ", rank,
                " is outside a tensor-parallel group of ", size);
  const int64_t dim = meta.shard == ShardKind::rows ? 0 : 1;
  TESSERA_CHECK(meta.shard == ShardKind::replicated || dims > dim, "shard_of: '", what, "' ", shape,
                " has no dim ", dim, " to split");
}

}  // namespace

Tensor shard_of(const Tensor& full, const ParamMeta& meta, int rank, int size,
                const std::string& what) {
  TESSERA_CHECK(full.defined(), "shard_of: '", what, "' is undefined");
  check_split(rank, size, meta, full.dim(), what, full.describe());
  if (meta.shard == ShardKind::replicated) return ops::clone(full);
  const int64_t dim = meta.shard == ShardKind::rows ? 0 : 1;
  const std::vector<int64_t> segments =
      split_segments(meta, full.size(dim), size, dim, what, full.describe());
  int64_t length = 0;
  for (int64_t s : segments) length += s;
  Tensor src = full;
  if (full.size(dim) != length) {
    TESSERA_CHECK(full.size(dim) == meta.unpadded_size && meta.unpadded_size < length,
                  "shard_of: '", what, "' ", full.describe(), " has ", full.size(dim),
                  " along dim ", dim, "; expected ", length,
                  meta.unpadded_size > 0 ? str_cat(" (or ", meta.unpadded_size, " unpadded)") : "");
    Shape padded = full.shape();
    padded[int(dim)] = length;
    src = zeros(padded, full.dtype(), full.device());
    ops::copy_(ops::narrow(src, dim, 0, full.size(dim)), full);
  }
  std::vector<Tensor> parts;
  int64_t start = 0;
  for (int64_t s : segments) {
    const int64_t part = s / size;
    parts.push_back(ops::narrow(src, dim, start + rank * part, part));
    start += s;
  }
  return parts.size() == 1 ? ops::clone(parts[0]) : ops::cat(parts, dim);
}

namespace {

// Where a rank's local tensor sits in the full one: along `dim` (-1: replicated, local = full),
// part k of the local tensor is `length` rows or columns from `local` on, taken from `full` on
// in the full tensor.
struct SplitPart {
  int64_t local, full, length;
};
struct LocalSplit {
  int64_t dim = -1;
  std::vector<SplitPart> parts;
  Shape local;
};

LocalSplit local_split(const Shape& full_shape, const ParamMeta& meta, int rank, int size,
                       const std::string& what) {
  const std::string shape = str_cat(full_shape);
  check_split(rank, size, meta, int64_t(full_shape.size()), what, shape);
  LocalSplit split;
  split.local = full_shape;
  if (meta.shard == ShardKind::replicated) return split;
  TESSERA_CHECK(full_shape.size() == 2, "init_normal_shard: '", what, "' ", shape,
                " is not a matrix");
  split.dim = meta.shard == ShardKind::rows ? 0 : 1;
  const std::vector<int64_t> segments =
      split_segments(meta, full_shape[int(split.dim)], size, split.dim, what, shape);
  int64_t start = 0, at = 0;  // the segment's start in the full dim, its part's in the local
  for (int64_t s : segments) {
    const int64_t part = s / size;
    split.parts.push_back({at, start + rank * part, part});
    start += s;
    at += part;
  }
  TESSERA_CHECK(full_shape[int(split.dim)] == start, "init_normal_shard: '", what, "' ", shape,
                " has ", full_shape[int(split.dim)], " along dim ", split.dim,
                "; its segments sum to ", start);
  split.local[int(split.dim)] = at;
  return split;
}

// A contiguous 1-D view of all of the contiguous tensor t.
Tensor flat(const Tensor& t) {
  return Tensor(t.storage(), Shape{t.numel()}, Strides{1}, t.offset(), t.dtype());
}

}  // namespace

ParamFill normal_fill(const Shape& full_shape, const InitSpec& spec, const ParamMeta& meta,
                      int rank, int size, const std::string& what) {
  const LocalSplit split = local_split(full_shape, meta, rank, size, what);
  if (spec.init == ParamInit::zeros) return constant_fill(0.0);
  TESSERA_CHECK(spec.zero_rows_from < 0 || full_shape.size() == 2, "normal_fill: '", what, "' ",
                full_shape, " zeroes rows from ", spec.zero_rows_from, " but is not a matrix");
  const int64_t cols = full_shape.empty() ? 1 : full_shape.back();
  const int64_t local_cols = split.local.empty() ? 1 : split.local.back();
  const int64_t local_numel = split.local.numel();
  // The full tensor's element (r, c) is stream position r * cols + c; from this position on
  // the rows are zero.
  const int64_t zero_from =
      spec.zero_rows_from < 0 ? std::numeric_limits<int64_t>::max() : spec.zero_rows_from * cols;
  return [=](int64_t begin, const Tensor& out) {
    TESSERA_CHECK(out.defined() && out.dim() == 1 && out.is_contiguous() &&
                      out.device() == Device::cpu() && out.dtype() == spec.dtype,
                  "normal_fill: '", what, "' fills a contiguous 1-D CPU ", dtype_name(spec.dtype),
                  " tensor, got ", out.defined() ? out.describe() : std::string("undefined"));
    const int64_t end = begin + out.numel();
    TESSERA_CHECK(begin >= 0 && end <= local_numel, "normal_fill: '", what, "' elements [", begin,
                  ", ", end, ") are outside its ", local_numel, " (local shape ", split.local, ")");
    // Local elements [lo, hi), which sit at consecutive stream positions from `position`.
    auto draw = [&](int64_t lo, int64_t hi, int64_t position) {
      if (lo >= hi) return;
      const int64_t n = hi - lo;
      const int64_t drawn = std::clamp<int64_t>(zero_from - position, 0, n);
      const Tensor dst = ops::narrow(out, 0, lo - begin, n);
      if (drawn > 0)
        backend_for(Device::cpu())
            .random_normal(ops::narrow(dst, 0, 0, drawn), 0.0, spec.std, spec.key,
                           uint64_t(position));
      if (drawn < n) ops::zero_(ops::narrow(dst, 0, drawn, n - drawn));
    };
    if (begin >= end) return;
    if (split.dim == -1) {
      draw(begin, end, begin);
    } else if (split.dim == 0) {
      // Rows: a part is whole rows, consecutive in the stream.
      for (const SplitPart& p : split.parts) {
        const int64_t first = p.local * cols;
        draw(std::max(begin, first), std::min(end, first + p.length * cols),
             p.full * cols + std::max(begin, first) - first);
      }
    } else {
      // Columns: each (row, part) run is consecutive in the stream.
      for (int64_t r = begin / local_cols; r <= (end - 1) / local_cols; ++r)
        for (const SplitPart& p : split.parts) {
          const int64_t first = r * local_cols + p.local;
          draw(std::max(begin, first), std::min(end, first + p.length),
               r * cols + p.full + std::max(begin, first) - first);
        }
    }
  };
}

ParamFill constant_fill(double value) {
  return [value](int64_t, const Tensor& out) { ops::fill_(out, value); };
}

Tensor materialize(const Shape& shape, DType dtype, const ParamFill& fill) {
  Tensor t = empty(shape, dtype, Device::cpu());
  fill(0, flat(t));
  return t;
}

WeightInit init_weight(const Shape& full_shape, const InitSpec& spec, const ParamMeta& meta,
                       int rank, int size, const std::string& what) {
  const Shape local = local_split(full_shape, meta, rank, size, what).local;
  ParamFill fill = normal_fill(full_shape, spec, meta, rank, size, what);
  if (spec.defer) return {unallocated(local, spec.dtype, Device::cpu()), std::move(fill)};
  return {materialize(local, spec.dtype, fill), ParamFill()};
}

Tensor init_normal(const Shape& shape, const InitSpec& spec) {
  return materialize(shape, spec.dtype, normal_fill(shape, spec, ParamMeta{}, 0, 1, "init_normal"));
}

Tensor init_normal_shard(const Shape& full_shape, const InitSpec& spec, const ParamMeta& meta,
                         int rank, int size, const std::string& what) {
  InitSpec held = spec;
  held.defer = false;
  return init_weight(full_shape, held, meta, rank, size, what).value;
}

double residual_init_std(const GPTConfig& config) {
  return kInitStd / std::sqrt(2.0 * double(config.n_layer));
}

LayerContext LayerContext::child(const std::string& name) const {
  LayerContext c = *this;
  c.prefix += name + ".";
  return c;
}

InitSpec LayerContext::init(const std::string& name, double std) const {
  InitSpec spec{param_key(config->init_seed, prefix + name), std, dtype, init_mode};
  spec.defer = defer;
  return spec;
}

}  // namespace tessera::nn
