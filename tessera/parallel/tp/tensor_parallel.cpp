#include "tessera/parallel/tp/tensor_parallel.h"

#include <utility>

#include "tessera/core/error.h"
#include "tessera/parallel/tp/detail/regions.h"
#include "tessera/parallel/tp/detail/vocab_cross_entropy.h"

namespace tessera::parallel::tp {

TensorParallel::TensorParallel(std::shared_ptr<Communicator> group, bool sequence_parallel)
    : group_(std::move(group)), sequence_parallel_(sequence_parallel) {
  TESSERA_CHECK(group_ != nullptr, "TensorParallel: the tensor-parallel group is null");
}

std::shared_ptr<TensorParallel> TensorParallel::from_mesh(const std::shared_ptr<DeviceMesh>& mesh,
                                                          bool sequence_parallel) {
  TESSERA_CHECK(mesh != nullptr, "TensorParallel::from_mesh: the mesh is null");
  // Shares ownership of the mesh, which owns the group.
  std::shared_ptr<Communicator> group(mesh, &mesh->tp());
  return std::make_shared<TensorParallel>(std::move(group), sequence_parallel);
}

Tensor TensorParallel::copy_to_region(const Tensor& x) {
  return tp::copy_to_region(x, group_);
}

Tensor TensorParallel::reduce_from_region(const Tensor& x) {
  return tp::reduce_from_region(x, group_);
}

Tensor TensorParallel::sequence_gather(const Tensor& x) {
  return tp::sequence_gather(x, group_);
}

Tensor TensorParallel::sequence_reduce_scatter(const Tensor& x) {
  return tp::sequence_reduce_scatter(x, group_);
}

Tensor TensorParallel::scatter_sequence(const Tensor& x) {
  return scatter_to_region(x, 1, group_);
}

Tensor TensorParallel::gather_sequence(const Tensor& x) {
  return gather_from_region(x, 1, group_);
}

Tensor TensorParallel::gather_last_dim(const Tensor& x) {
  return gather_from_region(x, -1, group_);
}

Tensor TensorParallel::vocab_parallel_cross_entropy(const Tensor& logits_shard,
                                                    const Tensor& targets, int64_t vocab_start,
                                                    int64_t num_classes, int64_t ignore_index) {
  return tp::vocab_parallel_cross_entropy(logits_shard, targets, vocab_start, num_classes,
                                          ignore_index, group_);
}

}  // namespace tessera::parallel::tp
