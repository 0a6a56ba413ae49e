#include "tessera/nn/shard_map.h"

#include <algorithm>

#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"

namespace tessera::nn {

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

ShardMap::ShardMap(const Shape& full_shape, int dim, std::vector<int64_t> segments, int rank,
                   int size, const std::string& what)
    : what_(what), full_(full_shape), local_(full_shape), dim_(dim) {
  const std::string shape = str_cat(full_shape);
  TESSERA_CHECK(size >= 1 && rank >= 0 && rank < size, "shard_of: rank ", rank,
                " is outside a tensor-parallel group of ", size);
  if (dim_ < 0) return;
  TESSERA_CHECK(dim_ < full_shape.size(), "shard map: '", what, "' ", shape, " has no dim ", dim_,
                " to split");
  if (segments.empty()) {
    TESSERA_CHECK(full_shape[dim_] % size == 0, "shard_of: '", what, "' ", shape, " dim ", dim_,
                  " (", full_shape[dim_], ") does not split evenly over ", size, " ranks");
    segments = {full_shape[dim_]};
  }
  int64_t start = 0, at = 0;  // the segment's start in the full dim, its part's in the local
  for (int64_t s : segments) {
    TESSERA_CHECK(s > 0 && s % size == 0, "shard_of: '", what, "' has a segment of ", s,
                  " along dim ", dim_, ", which does not split evenly over ", size, " ranks");
    const int64_t part = s / size, first = start + rank * part;
    parts_.push_back({at, first, part, std::clamp<int64_t>(full_shape[dim_] - first, 0, part)});
    start += s;
    at += part;
  }
  TESSERA_CHECK(start >= full_shape[dim_], "shard map: '", what, "' ", shape, " has ",
                full_shape[dim_], " along dim ", dim_, "; its segments sum to only ", start);
  local_[dim_] = at;
  for (int i = dim_ + 1; i < full_shape.size(); ++i) inner_ *= full_shape[i];
  for (int i = 0; i < dim_; ++i) outer_ *= full_shape[i];
}

namespace {

int split_dim(const ParamMeta& meta) {
  return meta.shard == ShardKind::replicated ? -1 : meta.shard == ShardKind::rows ? 0 : 1;
}

}  // namespace

ShardMap::ShardMap(const Shape& full_shape, const ParamMeta& meta, int rank, int size,
                   const std::string& what)
    : ShardMap(full_shape, split_dim(meta), meta.segments, rank, size, what) {
  TESSERA_CHECK(meta.shard != ShardKind::cols || full_shape.size() == 2, "shard map: '", what, "' ",
                full_shape, " is split by columns but is not a matrix");
  TESSERA_CHECK(dim_ < 0 || local_[dim_] * size == full_shape[dim_], "init_normal_shard: '", what,
                "' ", full_shape, " has ", full_shape[dim_], " along dim ", dim_,
                "; its segments sum to ", local_[dim_] * size);
}

void ShardMap::for_each_run(
    int64_t begin, int64_t end,
    const std::function<void(int64_t local, int64_t full, int64_t length)>& run) const {
  TESSERA_CHECK(begin >= 0 && begin <= end && end <= local_.numel(), "'", what_, "': elements [",
                begin, ", ", end, ") are outside its ", local_.numel(), " (local shape ", local_,
                ")");
  if (begin == end) return;
  if (dim_ < 0) return run(begin, begin, end - begin);
  // Per index o of the dims before the split one, part k is `valid * inner` consecutive full
  // elements: rows of a row split, a run within each row of a column split.
  const int64_t block = local_[dim_] * inner_;  // local elements per outer index
  for (int64_t o = begin / block; o < outer_ && o * block < end; ++o)
    for (const Part& p : parts_) {
      const int64_t first = (o * local_[dim_] + p.local) * inner_;
      const int64_t lo = std::max(begin, first), hi = std::min(end, first + p.valid * inner_);
      if (lo < hi) run(lo, (o * full_[dim_] + p.full) * inner_ + lo - first, hi - lo);
    }
}

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
    TESSERA_CHECK(full.size(dim) == meta.unpadded_size &&
                          meta.unpadded_size<length, "shard_of: '", what, "' ", full.describe(),
                                             " has ", full.size(dim), " along dim ", dim,
                                             "; expected ", length, meta.unpadded_size> 0
                      ? str_cat(" (or ", meta.unpadded_size, " unpadded)")
                      : "");
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

}  // namespace tessera::nn
