#include "tessera/nn/init.h"

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/random.h"

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

Tensor init_normal(const Shape& shape, const InitSpec& spec) {
  if (spec.init == ParamInit::zeros) return zeros(shape, spec.dtype, Device::cpu());
  Generator gen(spec.key, 0);
  return randn(shape, gen, spec.dtype, Device::cpu(), 0.0, spec.std);
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

Tensor init_normal_shard(const Shape& full_shape, const InitSpec& spec, const ParamMeta& meta,
                         int rank, int size, const std::string& what) {
  const std::string shape = str_cat(full_shape);
  check_split(rank, size, meta, int64_t(full_shape.size()), what, shape);
  if (meta.shard == ShardKind::replicated) return init_normal(full_shape, spec);
  TESSERA_CHECK(full_shape.size() == 2, "init_normal_shard: '", what, "' ", shape,
                " is not a matrix");
  const int64_t dim = meta.shard == ShardKind::rows ? 0 : 1;
  const std::vector<int64_t> segments =
      split_segments(meta, full_shape[int(dim)], size, dim, what, shape);
  int64_t length = 0;
  for (int64_t s : segments) length += s;
  TESSERA_CHECK(full_shape[int(dim)] == length, "init_normal_shard: '", what, "' ", shape, " has ",
                full_shape[int(dim)], " along dim ", dim, "; its segments sum to ", length);
  Shape local = full_shape;
  local[int(dim)] = length / size;
  Tensor out = zeros(local, spec.dtype, Device::cpu());
  if (spec.init == ParamInit::zeros) return out;
  // The full tensor's element (r, c) is stream position r * cols + c: draw only this rank's
  // runs of positions, each where shard_of would have put it.
  const int64_t cols = full_shape[1];
  auto draw = [&](const Tensor& dst, int64_t position) {
    Generator gen(spec.key, uint64_t(position));
    ops::copy_(dst, randn(dst.shape(), gen, spec.dtype, Device::cpu(), 0.0, spec.std));
  };
  int64_t start = 0, at = 0;  // the segment's start in the full dim, its part's in the local
  for (int64_t s : segments) {
    const int64_t part = s / size, first = start + rank * part;
    if (dim == 0)
      draw(ops::narrow(out, 0, at, part), first * cols);
    else
      for (int64_t r = 0; r < full_shape[0]; ++r)
        draw(ops::narrow(ops::select(out, 0, r), 0, at, part), r * cols + first);
    start += s;
    at += part;
  }
  return out;
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
  return InitSpec{param_key(config->init_seed, prefix + name), std, dtype, init_mode};
}

}  // namespace tessera::nn
