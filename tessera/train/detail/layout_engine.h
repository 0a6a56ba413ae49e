#pragma once
// LayoutEngine: the StepEngine for a GPT under a parallel layout, parallel::ParallelTrainer
// over the run's world. Every layout, one process included (dp = tp = pp = 1), runs this code;
// on one process it gives bit for bit the losses of nn::GPT with nn::AdamW and clipping, at
// the same step time (docs/training.md has the side-by-side figures).

#include <memory>

#include "tessera/parallel/engine/parallel_trainer.h"
#include "tessera/train/step_engine.h"

namespace tessera::train {

class LayoutEngine final : public StepEngine {
 public:
  // Builds this rank's part of the model (collective over world). `dropout_seed` keys the
  // dropout masks, as nn::GPT::set_dropout_seed.
  LayoutEngine(std::shared_ptr<parallel::Communicator> world, const nn::GPTConfig& model,
               const parallel::ParallelConfig& config, uint64_t dropout_seed);

  EngineStep step(const Tensor& inputs, const Tensor& targets) override;
  double evaluate(const Tensor& inputs, const Tensor& targets) override;
  nn::StateDict gather_model() override;
  void load_model(const nn::StateDict& full) override;
  void load_model_source(const std::shared_ptr<const nn::TensorSource>& source) override;
  bool load_checkpoint_files(const nn::TensorSource& model, const nn::TensorSource* optimizer,
                             const nlohmann::json* optimizer_scalars) override;
  nn::OptimizerState gather_optimizer() override;
  void load_optimizer(const nn::OptimizerState& full) override;
  bool load_checkpoint_set(const nn::ShardedSet& set,
                           const nlohmann::json* optimizer_scalars) override;
  LocalState local_state() override {
    return {trainer_.local_state(), trainer_.optimizer_scalars()};
  }
  void load_local_state(const LocalState& state) override {
    trainer_.load_local_state(state.tensors, state.optimizer_scalars);
  }
  bool set_trace(parallel::StepTrace* trace) override {
    trainer_.set_trace(trace);
    return true;
  }
  void set_before_update(std::function<void()> hook) override {
    trainer_.set_before_update(std::move(hook));
  }
  OwnedState owned_state() override {
    return {trainer_.checkpoint_pieces(), trainer_.optimizer_scalars()};
  }
  nlohmann::json precision_state() const override;
  void load_precision_state(const nlohmann::json& state) override;
  const nn::DynamicLossScaler* scaler() const override;
  void set_step(int64_t step) override { trainer_.set_step(step); }
  int dp_rank() const override { return trainer_.mesh().dp_rank(); }
  int dp_size() const override { return trainer_.config().mesh.size("dp"); }
  std::string describe() const override { return trainer_.describe(); }
  nlohmann::json layout_json() const override;

  parallel::ParallelTrainer& trainer() { return trainer_; }

 private:
  parallel::ParallelTrainer trainer_;
};

}  // namespace tessera::train
