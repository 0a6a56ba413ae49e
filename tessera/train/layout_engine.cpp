#include "tessera/train/detail/layout_engine.h"

#include "tessera/core/ops/movement.h"

namespace tessera::train {

namespace {

// A state's tensors on the CPU (checkpoints and the single-process format live there).
nn::StateDict on_cpu(nn::StateDict tensors) {
  for (auto& [name, t] : tensors)
    if (!t.device().is_cpu()) t = ops::to(t, Device::cpu());
  return tensors;
}

}  // namespace

LayoutEngine::LayoutEngine(std::shared_ptr<parallel::Communicator> world,
                           const nn::GPTConfig& model, const parallel::ParallelConfig& config,
                           uint64_t dropout_seed)
    : trainer_(std::move(world), model, config) {
  for (const auto& chunk : trainer_.chunks()) chunk->set_dropout_seed(dropout_seed);
}

EngineStep LayoutEngine::step(const Tensor& inputs, const Tensor& targets) {
  const parallel::ParallelStepStats s = trainer_.step_local(inputs, targets);
  EngineStep out;
  out.loss = s.loss;
  out.grad_norm = s.grad_norm;
  out.lr = s.lr;
  out.loss_scale = s.loss_scale;
  out.skipped = s.skipped;
  out.seconds = s.seconds;
  out.comm_seconds = s.comm_seconds;
  out.forward_seconds = s.forward_seconds;
  out.backward_seconds = s.backward_seconds;
  out.optimizer_seconds = s.optimizer_seconds;
  out.comm_bytes = s.comm_wire_bytes;
  out.bubble = s.bubble;
  out.memory = s.memory;
  return out;
}

double LayoutEngine::evaluate(const Tensor& inputs, const Tensor& targets) {
  return trainer_.evaluate_local(inputs, targets);
}

nn::StateDict LayoutEngine::gather_model() {
  return on_cpu(trainer_.gather_full_state());
}

void LayoutEngine::load_model(const nn::StateDict& full) {
  trainer_.load_full_state(full);
}

void LayoutEngine::load_model_source(const std::shared_ptr<const nn::TensorSource>& source) {
  trainer_.load_model_source(*source);
}

bool LayoutEngine::load_checkpoint_files(const nn::TensorSource& model,
                                         const nn::TensorSource* optimizer,
                                         const nlohmann::json* optimizer_scalars) {
  trainer_.load_checkpoint_source(model, optimizer, optimizer_scalars);
  return true;
}

nn::OptimizerState LayoutEngine::gather_optimizer() {
  nn::OptimizerState state = trainer_.gather_full_optimizer_state();
  state.tensors = on_cpu(std::move(state.tensors));
  return state;
}

void LayoutEngine::load_optimizer(const nn::OptimizerState& full) {
  trainer_.load_full_optimizer_state(full);
}

bool LayoutEngine::load_checkpoint_set(const nn::ShardedSet& set,
                                       const nlohmann::json* optimizer_scalars) {
  trainer_.load_checkpoint_set(set, optimizer_scalars);
  return true;
}

nlohmann::json LayoutEngine::precision_state() const {
  return trainer_.precision().state();
}

void LayoutEngine::load_precision_state(const nlohmann::json& state) {
  trainer_.precision().load_state(state);
}

const nn::DynamicLossScaler* LayoutEngine::scaler() const {
  return trainer_.precision().scaler();
}

nlohmann::json LayoutEngine::layout_json() const {
  const parallel::ParallelConfig& pc = trainer_.config();
  return {{"dp", pc.mesh.size("dp")},      {"tp", pc.mesh.size("tp")},
          {"pp", pc.mesh.size("pp")},      {"virtual_stages", pc.virtual_stages},
          {"zero", pc.zero_stage}, {"layout", pc.describe()}};
}

}  // namespace tessera::train
