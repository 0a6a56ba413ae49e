#pragma once
// TensorParallel: nn::TensorParallelOps over a communicator, the object a model is built with
// for Megatron-style tensor parallelism (see nn/model_parallel.h and nn/gpt.h):
//
//   auto mesh = std::make_shared<parallel::DeviceMesh>(world, parallel::MeshShape{dp, pp, tp});
//   nn::ModelParallel mp;
//   mp.tp = parallel::tp::TensorParallel::from_mesh(mesh, /*sequence_parallel=*/true);
//   nn::GPT model(config, DType::f32, mp);
//
// Every method is a collective over the group (see regions.h and vocab_cross_entropy.h).

#include <memory>

#include "tessera/nn/model_parallel.h"
#include "tessera/parallel/comm/communicator.h"
#include "tessera/parallel/mesh.h"

namespace tessera::parallel::tp {

class TensorParallel final : public nn::TensorParallelOps {
 public:
  TensorParallel(std::shared_ptr<Communicator> group, bool sequence_parallel);
  // Over the mesh's tp group (the object keeps the mesh alive).
  static std::shared_ptr<TensorParallel> from_mesh(const std::shared_ptr<DeviceMesh>& mesh,
                                                   bool sequence_parallel);

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  bool sequence_parallel() const override { return sequence_parallel_; }
  const std::shared_ptr<Communicator>& group() const { return group_; }

  Tensor copy_to_region(const Tensor& x) override;
  Tensor reduce_from_region(const Tensor& x) override;
  Tensor sequence_gather(const Tensor& x) override;
  Tensor sequence_reduce_scatter(const Tensor& x) override;
  Tensor scatter_sequence(const Tensor& x) override;
  Tensor gather_sequence(const Tensor& x) override;
  Tensor gather_last_dim(const Tensor& x) override;
  Tensor vocab_parallel_cross_entropy(const Tensor& logits_shard, const Tensor& targets,
                                      int64_t vocab_start, int64_t num_classes,
                                      int64_t ignore_index) override;

 private:
  std::shared_ptr<Communicator> group_;
  bool sequence_parallel_;
};

}  // namespace tessera::parallel::tp
