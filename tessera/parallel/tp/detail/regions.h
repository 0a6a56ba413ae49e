#pragma once
// The autograd functions of Megatron-style tensor parallelism, over a tensor-parallel group.
//
//   function                  forward                      backward
//   copy_to_region            identity                     all-reduce
//   reduce_from_region        all-reduce                   identity
//   gather_from_region(dim)   all-gather along dim         this rank's slice of dim
//   scatter_to_region(dim)    this rank's slice of dim     all-gather along dim
//   sequence_gather(dim)      all-gather along dim         reduce-scatter along dim
//   sequence_reduce_scatter   reduce-scatter along dim     all-gather along dim
//
// Each is a collective: every rank of the group calls it, in the same order, with tensors of
// the same shape. Pieces are joined in rank order, and rank r's slice of a dim of length n is
// [r n / size, (r + 1) n / size); a dim that does not divide evenly throws naming the shape.
// The sums are done by the communicator, which hands every rank bit-identical values. A group
// of one makes every function the identity.

#include <cstdint>
#include <memory>

#include "tessera/core/tensor.h"
#include "tessera/parallel/comm/communicator.h"

namespace tessera::parallel::tp {

Tensor copy_to_region(const Tensor& x, const std::shared_ptr<Communicator>& group);
Tensor reduce_from_region(const Tensor& x, const std::shared_ptr<Communicator>& group);
Tensor gather_from_region(const Tensor& x, int64_t dim, const std::shared_ptr<Communicator>& group);
Tensor scatter_to_region(const Tensor& x, int64_t dim, const std::shared_ptr<Communicator>& group);
// The sequence-parallel pair (dim 1 of [B, T, C] by default).
Tensor sequence_gather(const Tensor& x, const std::shared_ptr<Communicator>& group,
                       int64_t dim = 1);
Tensor sequence_reduce_scatter(const Tensor& x, const std::shared_ptr<Communicator>& group,
                               int64_t dim = 1);

// The raw collectives beneath them (no autograd); results are new contiguous tensors.
Tensor all_gather_along(const Tensor& x, int64_t dim, Communicator& group);
Tensor reduce_scatter_along(const Tensor& x, int64_t dim, Communicator& group);
Tensor slice_along(const Tensor& x, int64_t dim, const Communicator& group);
Tensor all_reduce_copy(const Tensor& x, Communicator& group);

}  // namespace tessera::parallel::tp
