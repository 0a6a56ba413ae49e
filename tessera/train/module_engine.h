#pragma once
// ModuleEngine: the StepEngine for a model and optimizer of the caller's own (and for
// `tessera train --optimizer sgd` and --stochastic-rounding): any Module whose loss the caller
// computes, any nn::Optimizer, under data parallelism with ZeRO 0 over the run's world (every
// rank holds the whole model; gradients are averaged over the ranks after the last
// micro-batch). Tensor and pipeline parallelism and ZeRO >= 1 need the model's parallel hooks
// (nn::ModelParallel, pipeline stages) and the sharded AdamW: those layouts are the
// LayoutEngine's, for the GPT.
//
// One step: the rows split into `micro_batches` micro-batches; each one's mean loss, weighted
// by its share of the global count of counted targets, runs backward through
// nn::MixedPrecision (fp32, or bf16/fp16 compute over fp32 masters); the masters' gradients are
// averaged over the world; then the clipped update. On one rank this is exactly the plain
// nn training step.

#include <functional>
#include <memory>

#include "tessera/nn/lr_schedule.h"
#include "tessera/nn/optim/mixed_precision.h"
#include "tessera/parallel/comm/communicator.h"
#include "tessera/train/step_engine.h"

namespace tessera::train {

// The mean loss of `model` on a micro-batch over its targets that are not ignore_index, at
// optimizer step `step` (for dropout masks and the like).
using LossFn = std::function<Tensor(nn::Module& model, const Tensor& inputs, const Tensor& targets,
                                    int64_t step)>;

struct ModuleParts {
  std::shared_ptr<nn::Module> master;  // fp32: what the optimizer updates and checkpoints hold
  // The same model in the compute dtype of a bf16/fp16 policy (parameters under the same
  // names), which the forward and backward run; null under fp32.
  std::shared_ptr<nn::Module> compute;
  LossFn loss;
  std::shared_ptr<nn::Optimizer> optimizer;  // over master->named_parameters()
};

struct ModuleEngineConfig {
  int micro_batches = 1;  // per rank and step
  int64_t ignore_index = -100;
  nn::LRSchedule lr_schedule{.kind = nn::ScheduleKind::constant, .max_lr = 1e-3};
  double max_grad_norm = 1.0;  // <= 0: off
  nn::Precision precision = nn::Precision::fp32;
  nn::LossScalerOptions loss_scaler;
  bool stochastic_rounding = false;  // bf16 with an AdamW: round the masters stochastically
  uint64_t rounding_seed = 0;
  Device device = Device::cpu();  // where the parts' parameters are
};

class ModuleEngine final : public StepEngine {
 public:
  ModuleEngine(std::shared_ptr<parallel::Communicator> world, ModuleParts parts,
               const ModuleEngineConfig& config);

  EngineStep step(const Tensor& inputs, const Tensor& targets) override;
  double evaluate(const Tensor& inputs, const Tensor& targets) override;
  nn::StateDict gather_model() override;
  void load_model(const nn::StateDict& full) override;
  // Read straight into the master's tensors when they are on the CPU; through a whole read
  // (the default) when they are on a device.
  void load_model_source(const std::shared_ptr<const nn::TensorSource>& source) override;
  nn::OptimizerState gather_optimizer() override;
  // Everything is replicated: each rank writes its flat share of every tensor.
  OwnedState owned_state() override;
  void set_before_update(std::function<void()> hook) override { before_update_ = std::move(hook); }
  // The whole model and optimizer state ("model/<name>", "optimizer/<name>"): every rank
  // holds all of it.
  LocalState local_state() override;
  void load_local_state(const LocalState& state) override;
  void load_optimizer(const nn::OptimizerState& full) override;
  nlohmann::json precision_state() const override { return precision_->state(); }
  void load_precision_state(const nlohmann::json& state) override;
  const nn::DynamicLossScaler* scaler() const override { return precision_->scaler(); }
  void set_step(int64_t step) override { step_ = step; }
  int dp_rank() const override { return world_->rank(); }
  int dp_size() const override { return world_->size(); }
  std::string describe() const override;
  nlohmann::json layout_json() const override;

  // The model the forward runs (compute, or master under fp32).
  nn::Module& net() { return parts_.compute ? *parts_.compute : *parts_.master; }

 private:
  // The mean over the world of one value per rank.
  double world_average(double value);

  std::shared_ptr<parallel::Communicator> world_;
  ModuleParts parts_;
  ModuleEngineConfig config_;
  std::function<void()> before_update_;
  std::unique_ptr<nn::MixedPrecision> precision_;
  int64_t step_ = 0;
};

}  // namespace tessera::train
