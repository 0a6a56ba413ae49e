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

ShardMap::ShardMap(const Shape& full_shape, const ParamMeta& meta, int rank, int size,
                   const std::string& what)
    : what_(what), full_(full_shape), local_(full_shape) {
  const std::string shape = str_cat(full_shape);
  check_split(rank, size, meta, int64_t(full_shape.size()), what, shape);
  if (meta.shard == ShardKind::replicated) return;
  dim_ = meta.shard == ShardKind::rows ? 0 : 1;
  TESSERA_CHECK(dim_ == 0 || full_shape.size() == 2, "shard map: '", what, "' ", shape,
                " is split by columns but is not a matrix");
  const std::vector<int64_t> segments =
      split_segments(meta, full_shape[int(dim_)], size, dim_, what, shape);
  int64_t start = 0, at = 0;  // the segment's start in the full dim, its part's in the local
  for (int64_t s : segments) {
    const int64_t part = s / size;
    parts_.push_back({at, start + rank * part, part});
    start += s;
    at += part;
  }
  TESSERA_CHECK(full_shape[int(dim_)] == start, "init_normal_shard: '", what, "' ", shape, " has ",
                full_shape[int(dim_)], " along dim ", dim_, "; its segments sum to ", start);
  local_[int(dim_)] = at;
}

void ShardMap::for_each_run(
    int64_t begin, int64_t end,
    const std::function<void(int64_t local, int64_t full, int64_t length)>& run) const {
  TESSERA_CHECK(begin >= 0 && begin <= end && end <= local_.numel(), "'", what_, "': elements [",
                begin, ", ", end, ") are outside its ", local_.numel(), " (local shape ", local_,
                ")");
  if (begin == end) return;
  auto part = [&](int64_t first, int64_t length, int64_t full) {
    const int64_t lo = std::max(begin, first), hi = std::min(end, first + length);
    if (lo < hi) run(lo, full + lo - first, hi - lo);
  };
  if (dim_ == -1) return run(begin, begin, end - begin);
  if (dim_ == 0) {
    // Rows (of any rank: a row is all the elements of one index of dim 0): a part is whole
    // rows, consecutive in the full tensor.
    const int64_t row = full_[0] == 0 ? 0 : full_.numel() / full_[0];
    for (const Part& p : parts_) part(p.local * row, p.length * row, p.full * row);
    return;
  }
  const int64_t cols = full_.back();
  // Columns: each (row, part) is consecutive.
  const int64_t local_cols = local_.back();
  for (int64_t r = begin / local_cols; r <= (end - 1) / local_cols; ++r)
    for (const Part& p : parts_) part(r * local_cols + p.local, p.length, r * cols + p.full);
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
