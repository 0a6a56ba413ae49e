#include "tessera/train/module_engine.h"

#include <chrono>

#include "tessera/autograd/functions/elementwise.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/allocator.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/nn/optim/adamw.h"
#include "tessera/parallel/engine/detail/loss_weights.h"
#include "tessera/parallel/tp/detail/full_state.h"

namespace tessera::train {

namespace {

using Clock = std::chrono::steady_clock;

nn::StateDict on_cpu(const nn::StateDict& tensors) {
  nn::StateDict out;
  for (const auto& [name, t] : tensors)
    out.emplace_back(name, t.device().is_cpu() ? t : ops::to(t, Device::cpu()));
  return out;
}

}  // namespace

ModuleEngine::ModuleEngine(std::shared_ptr<parallel::Communicator> world, ModuleParts parts,
                           const ModuleEngineConfig& config)
    : world_(std::move(world)), parts_(std::move(parts)), config_(config) {
  TESSERA_CHECK(world_ != nullptr, "ModuleEngine: the world communicator is null");
  TESSERA_CHECK(parts_.master != nullptr && parts_.optimizer != nullptr && parts_.loss,
                "ModuleEngine: the model, its optimizer and its loss are all required");
  TESSERA_CHECK(config_.micro_batches >= 1, "ModuleEngine: micro_batches must be >= 1, got ",
                config_.micro_batches);
  // Gradients on a CUDA device need a world that carries them (the NCCL communicator); the
  // MPI communicator refuses them in one line at the first all-reduce.
  const bool mixed = config_.precision != nn::Precision::fp32;
  TESSERA_CHECK(mixed == (parts_.compute != nullptr), "ModuleEngine: precision ",
                nn::precision_name(config_.precision),
                mixed ? " needs the model in its compute dtype (ModuleParts::compute)"
                      : " trains the master itself; ModuleParts::compute must be null");
  precision_ =
      std::make_unique<nn::MixedPrecision>(config_.precision, parts_.master->named_parameters(),
                                           net().named_parameters(), config_.loss_scaler);
  if (config_.stochastic_rounding) precision_->set_stochastic_rounding(config_.rounding_seed);
}

EngineStep ModuleEngine::step(const Tensor& inputs, const Tensor& targets) {
  const Clock::time_point start = Clock::now();
  const int M = config_.micro_batches;
  TESSERA_CHECK(inputs.defined() && targets.defined() && inputs.dim() == 2 &&
                    inputs.shape() == targets.shape() && inputs.size(0) % M == 0,
                "ModuleEngine::step: inputs and targets must be [rows, T] with rows divisible ",
                "by the ", M, " micro-batches, got ",
                inputs.defined() ? inputs.describe() : std::string("undefined"), " and ",
                targets.defined() ? targets.describe() : std::string("undefined"));
  EngineStep out;
  out.lr = config_.lr_schedule.lr(step_);
  parts_.optimizer->set_lr(out.lr);
  const std::vector<double> weights =
      parallel::micro_batch_weights(targets, M, config_.ignore_index, *world_, Device::cpu());
  Allocator& alloc = allocator_for(config_.device);
  const int64_t live_before = alloc.stats().live_bytes;
  alloc.reset_peak();
  const int64_t rows = inputs.size(0) / M;
  double loss_sum = 0;
  for (int m = 0; m < M; ++m) {
    const Tensor x =
        ops::to(ops::contiguous(ops::narrow(inputs, 0, m * rows, rows)), config_.device);
    const Tensor y =
        ops::to(ops::contiguous(ops::narrow(targets, 0, m * rows, rows)), config_.device);
    const Clock::time_point f0 = Clock::now();
    Tensor loss = parts_.loss(net(), x, y, step_);
    // The micro-batch's weight (1 unless targets are ignored unevenly) and the 1 / M average.
    const double scale = weights[size_t(m)] / M;
    loss_sum += loss.item<float>() * weights[size_t(m)];
    if (scale != 1.0) loss = mul(loss, scale);
    const Clock::time_point b0 = Clock::now();
    out.forward_seconds += std::chrono::duration<double>(b0 - f0).count();
    precision_->scale_loss(loss).backward();
    precision_->accumulate_grads();
    out.backward_seconds += std::chrono::duration<double>(Clock::now() - b0).count();
  }
  out.memory.activations = std::max<int64_t>(0, alloc.stats().peak_bytes - live_before);
  if (world_->size() > 1) {
    // ZeRO 0: every master gradient averaged over the ranks, in parameter order (a parameter
    // no micro-batch reached contributes zeros, so every rank issues the same collectives).
    const Clock::time_point t0 = Clock::now();
    const int64_t sent_before = world_->traffic().total_wire_bytes();
    for (const auto& [name, p] : parts_.master->named_parameters()) {
      if (!p.grad().defined()) p.set_grad(zeros_like(p));
      world_->all_reduce(p.grad(), parallel::CommOp::avg);
    }
    out.comm_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    out.backward_seconds += out.comm_seconds;  // the gradients' reduction ends the backward
    out.comm_bytes = world_->traffic().total_wire_bytes() - sent_before;
  }
  if (before_update_) before_update_();
  const Clock::time_point u0 = Clock::now();
  const nn::PrecisionStep ps = precision_->step(*parts_.optimizer, config_.max_grad_norm);
  parts_.optimizer->zero_grad();
  out.optimizer_seconds = std::chrono::duration<double>(Clock::now() - u0).count();
  out.loss = world_average(loss_sum / M);
  out.grad_norm = ps.grad_norm;
  out.loss_scale = ps.loss_scale;
  out.skipped = ps.skipped;
  for (const auto& [name, p] : parts_.master->named_parameters())
    out.memory.parameters += int64_t(p.nbytes());
  if (parts_.compute)
    for (const auto& [name, p] : parts_.compute->named_parameters())
      out.memory.parameters += int64_t(p.nbytes());
  out.memory.parameters_peak = out.memory.parameters;
  out.memory.gradients = out.memory.parameters;  // one fp32 gradient per master parameter
  for (const auto& [name, t] : parts_.optimizer->state_dict().tensors)
    out.memory.optimizer_state += int64_t(t.nbytes());
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ++step_;
  return out;
}

double ModuleEngine::evaluate(const Tensor& inputs, const Tensor& targets) {
  NoGradGuard no_grad;
  net().eval();
  const std::vector<double> weights =
      parallel::micro_batch_weights(targets, 1, config_.ignore_index, *world_, Device::cpu());
  const double loss = parts_
                          .loss(net(), ops::to(ops::contiguous(inputs), config_.device),
                                ops::to(ops::contiguous(targets), config_.device), step_)
                          .item<float>();
  net().train();
  return world_average(loss * weights[0]);
}

double ModuleEngine::world_average(double value) {
  if (world_->size() == 1) return value;
  Tensor t = from_vector<double>({value}, Shape{1});
  world_->all_reduce(t, parallel::CommOp::avg);
  return t.item<double>();
}

nn::StateDict ModuleEngine::gather_model() {
  return on_cpu(parts_.master->state_dict());
}

void ModuleEngine::load_model(const nn::StateDict& full) {
  parts_.master->load_state_dict(full);
  precision_->sync_compute();
}

void ModuleEngine::load_model_source(const std::shared_ptr<const nn::TensorSource>& source) {
  for (const auto& [name, t] : parts_.master->state_dict())
    if (!t.device().is_cpu() || !t.is_contiguous()) return StepEngine::load_model_source(source);
  parallel::tp::read_full_source(*parts_.master, source, 0, 1);
  precision_->sync_compute();
}

nn::OptimizerState ModuleEngine::gather_optimizer() {
  nn::OptimizerState state = parts_.optimizer->state_dict();
  state.tensors = on_cpu(state.tensors);
  return state;
}

OwnedState ModuleEngine::owned_state() {
  const int rank = world_->rank(), ranks = world_->size();
  nn::OptimizerState optimizer = parts_.optimizer->state_dict();
  OwnedState out{nn::replicated_pieces(parts_.master->state_dict(), false, rank, ranks),
                 optimizer.scalars};
  for (nn::ShardPiece& p : nn::replicated_pieces(optimizer.tensors, true, rank, ranks))
    out.pieces.push_back(std::move(p));
  return out;
}

LocalState ModuleEngine::local_state() {
  nn::OptimizerState optimizer = parts_.optimizer->state_dict();
  LocalState out{{}, optimizer.scalars};
  for (const auto& [name, t] : parts_.master->state_dict()) out.tensors.emplace_back("model/" + name, t);
  for (const auto& [name, t] : optimizer.tensors) out.tensors.emplace_back("optimizer/" + name, t);
  return out;
}

void ModuleEngine::load_local_state(const LocalState& state) {
  nn::StateDict model;
  nn::OptimizerState optimizer{{}, state.optimizer_scalars};
  for (const auto& [name, t] : state.tensors) {
    if (name.starts_with("model/"))
      model.emplace_back(name.substr(6), t);
    else if (name.starts_with("optimizer/"))
      optimizer.tensors.emplace_back(name.substr(10), t);
    else
      detail::throw_error("ModuleEngine::load_local_state: unexpected tensor '", name, "'");
  }
  load_model(model);
  load_optimizer(optimizer);
}

void ModuleEngine::load_optimizer(const nn::OptimizerState& full) {
  parts_.optimizer->load_state_dict(full);
}

void ModuleEngine::load_precision_state(const nlohmann::json& state) {
  precision_->load_state(state);
}

std::string ModuleEngine::describe() const {
  return str_cat(world_->size() == 1 ? "one process" : str_cat("dp", world_->size(), ", ZeRO-0"),
                 ", ", config_.micro_batches, " micro-batch",
                 config_.micro_batches == 1 ? "" : "es", " per step, the caller's model and ",
                 "optimizer", config_.device.is_cpu() ? "" : str_cat(", on ", config_.device));
}

nlohmann::json ModuleEngine::layout_json() const {
  if (world_->size() == 1) return nlohmann::json::object();
  return {{"dp", world_->size()}, {"tp", 1}, {"pp", 1}, {"zero", 0}, {"layout", describe()}};
}

}  // namespace tessera::train
