#pragma once
// Optimizer: parameter groups, step(), zero_grad(), and its state as tensors plus JSON-able
// scalars (for checkpoints); and global-norm gradient clipping.
//
// Every update reads each parameter's .grad multiplied by a grad_scale the caller passes
// (the global-norm clip factor, 1/loss-scale, ...), applied inside the update itself rather
// than as an extra pass over the gradients. A parameter without a gradient is left alone.
// Gradient accumulation needs nothing here: backward() adds into .grad across micro-steps
// (each loss scaled by 1/steps) until zero_grad().

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/tensor.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

struct ParamGroup {
  std::string name;           // unique within the optimizer: "decay", "no_decay", ...
  StateDict params;           // (parameter name, parameter); names are unique
  double weight_decay = 0.0;  // decoupled (AdamW) or L2 (SGD)
  double lr_scale = 1.0;      // this group's lr is the optimizer's lr times this
};

// GPT-style groups for a model's named parameters: "decay" holds every parameter with at least
// two dims (weights, embeddings) with weight_decay; "no_decay" holds biases, norm weights and
// every other 1-D (or 0-D) parameter, with none. Empty groups are dropped.
std::vector<ParamGroup> decay_groups(const StateDict& params, double weight_decay);

// An optimizer's state: per-parameter tensors named "<parameter>.<slot>" (for example
// "h.0.attn.c_attn.weight.exp_avg") and scalars (step count, hyperparameters, groups).
struct OptimizerState {
  StateDict tensors;
  nlohmann::json scalars;
};

class Optimizer {
 public:
  Optimizer(std::vector<ParamGroup> groups, double lr, const char* kind);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update; the step count goes up by one first (it is 1-based inside the update).
  virtual void step(double grad_scale = 1.0) = 0;
  // Drops every gradient (the next backward pass writes fresh ones).
  void zero_grad();

  double lr() const { return lr_; }
  void set_lr(double lr);
  int64_t step_count() const { return step_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }
  std::vector<Tensor> parameters() const;

  OptimizerState state_dict() const;
  // Restores a state from state_dict() of an optimizer of the same kind over the same
  // parameters and groups; throws naming the field, group or tensor that does not match,
  // before changing anything.
  void load_state_dict(const OptimizerState& state);
  // Restores only the scalars of such a state (step, lr, groups' rates, hyperparameters),
  // checked as load_state_dict() checks them: for a caller that restores the slots itself.
  void load_scalars(const nlohmann::json& scalars);

 protected:
  // The per-parameter state slots ("exp_avg", ...) and their tensors, parallel to groups.
  virtual std::vector<std::string> slot_names() const = 0;
  virtual Tensor& slot(size_t group, size_t param, size_t slot) = 0;
  virtual const Tensor& slot(size_t group, size_t param, size_t slot) const = 0;
  // Hyperparameters beyond lr, as JSON, and their validated restore.
  virtual nlohmann::json hyperparameters() const = 0;
  virtual void load_hyperparameters(const nlohmann::json& j) = 0;

  std::vector<ParamGroup> groups_;
  double lr_;
  int64_t step_ = 0;

 private:
  // The scalars a state carries, validated; applied only once everything else checks out.
  struct CheckedScalars {
    int64_t step = 0;
    double lr = 0;
    std::vector<std::pair<double, double>> rates;  // (weight_decay, lr_scale) per group
  };
  CheckedScalars check_scalars(const nlohmann::json& j) const;
  void apply_scalars(const nlohmann::json& j, const CheckedScalars& checked);

  std::string kind_;
};

// ---- global-norm clipping, folded into the update: the norm over all gradients is computed
// once (one ops::squared_norm over the list) and the clip factor rides in grad_scale ----

// The L2 norm of every defined gradient of `params` taken together (missing ones count as 0).
double global_grad_norm(const std::vector<Tensor>& params);

// The factor that brings a gradient of norm `norm` within max_norm: max_norm / (norm + 1e-6)
// when norm exceeds max_norm (torch.nn.utils.clip_grad_norm_'s formula), else 1. max_norm
// <= 0 disables clipping.
double clip_factor(double norm, double max_norm);

// Computes the global norm of the optimizer's gradients, steps with grad_scale =
// clip_factor(norm, max_norm) * extra_scale, and returns the pre-clip norm for logging.
// A non-finite norm throws before any parameter changes (the caller may skip the step).
double clip_and_step(Optimizer& optimizer, double max_norm, double extra_scale = 1.0);

}  // namespace tessera::nn
