#pragma once
// Where a tensor-parallel rank's elements sit in the full tensor.
//
// A split parameter (ParamMeta rows or cols) is, on rank r of `size`, part r of every segment
// of the split dim, in order. Element (i, j) of the full row-major matrix is position
// i * cols + j, so any range of the rank's local elements is a few runs of consecutive full
// positions: one per part for a row split, one per (row, part) for a column split. Whatever
// makes values by full position (the Philox stream of a parameter's init key, a checkpoint
// file holding the full tensor) can then make exactly a rank's part, or any piece of it,
// without the whole.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/core/shape.h"
#include "tessera/core/tensor.h"
#include "tessera/nn/model_parallel.h"

namespace tessera::nn {

class ShardMap {
 public:
  // Rank `rank` of `size`'s part of a tensor of `full_shape` split along `dim` (-1: not split,
  // the part is all of it): the dim is `segments` one after another (empty: one segment of
  // full_shape[dim]), each divisible by size, rank r holding part r of each in order. Their sum
  // may exceed full_shape[dim]: the elements past it are tensor-parallel padding, held by the
  // rank's local tensor but in no run. Errors name `what`.
  ShardMap(const Shape& full_shape, int dim, std::vector<int64_t> segments, int rank, int size,
           const std::string& what);
  // The split `meta` describes (rows: dim 0, cols: dim 1, replicated: none) of a full tensor
  // whose split dim is exactly the segments' sum (a matrix for cols).
  ShardMap(const Shape& full_shape, const ParamMeta& meta, int rank, int size,
           const std::string& what);

  const Shape& full_shape() const { return full_; }
  const Shape& local_shape() const { return local_; }

  // Calls run(local, full, length) for each run of `length` consecutive full positions from
  // `full` that holds local elements [local, local + length), for the local elements in
  // [begin, end) in order; padding elements are in no run. Throws naming the tensor if the
  // range is outside the local tensor.
  void for_each_run(
      int64_t begin, int64_t end,
      const std::function<void(int64_t local, int64_t full, int64_t length)>& run) const;

 private:
  // Along the split dim, part k of the local tensor is `length` indices from `local` on, taken
  // from `full` on in the full tensor (of which the first `valid` exist; the rest is padding).
  struct Part {
    int64_t local, full, length, valid;
  };
  std::string what_;
  Shape full_, local_;
  int dim_ = -1;                   // -1: not split
  int64_t inner_ = 1, outer_ = 1;  // elements per index of the split dim; indices before it
  std::vector<Part> parts_;
};

// Rank `rank`'s part (of `size`) of the full tensor `full` as `meta` splits it: all of it when
// replicated; otherwise part `rank` of every segment of the split dim, in order. A full tensor
// whose split dim has meta.unpadded_size is first padded with zero rows to the segments' sum.
// Returns a new contiguous tensor; `what` names the tensor in errors.
Tensor shard_of(const Tensor& full, const ParamMeta& meta, int rank, int size,
                const std::string& what);

}  // namespace tessera::nn
