#pragma once
// Mixed precision: a Precision policy and MixedPrecision, which keeps a model's parameters in
// the compute dtype and their fp32 master copies, which the optimizer updates.
//
//   fp32  the model is the master; nothing is copied (the plain training step).
//   bf16  parameters and activations in bf16, fp32 master weights and optimizer state. bf16
//         has fp32's exponent range, so no loss scaling is needed; a non-finite gradient norm
//         means divergence and throws, as in fp32.
//   fp16  as bf16 but in fp16, whose 5-bit exponent needs the loss scaled
//         (DynamicLossScaler): an overflowing step is skipped and the scale backs off.
//
// One step: forward on the compute model, backward of scale_loss(loss), accumulate_grads()
// after each backward (the gradients move into fp32 on the master, so micro-batches
// accumulate in fp32), then step(): the global norm of the fp32 gradients is the overflow
// check; unscaling and clipping ride in the optimizer's grad_scale; the updated master weights
// are rounded back into the compute parameters, by AdamW in the same pass as the update
// (AdamW::step_rounded), or by a cast pass after any other optimizer. bf16 may round
// stochastically (set_stochastic_rounding): each master rounds up or down at random with
// probabilities that make the expected bf16 value the master, so updates far below bf16's
// resolution still move the compute weights on average. Losses, softmax statistics and
// normalisation statistics are computed in fp32 by the ops themselves (see core/ops), whatever
// the policy.

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/core/dtype.h"
#include "tessera/core/tensor.h"
#include "tessera/nn/module.h"
#include "tessera/nn/optim/loss_scaler.h"
#include "tessera/nn/optim/optimizer.h"

namespace tessera::nn {

enum class Precision { fp32, bf16, fp16 };

// "fp32", "bf16", "fp16"; anything else throws naming the value and the choices.
Precision parse_precision(const std::string& name);
const char* precision_name(Precision precision);
// The dtype of the model's parameters and activations under the policy.
DType compute_dtype(Precision precision);

struct PrecisionStep {
  double grad_norm = 0;   // of the unscaled fp32 gradients, before clipping (inf/nan if skipped)
  bool skipped = false;   // fp16 overflow: nothing was updated
  double loss_scale = 1;  // the scale this step's backward ran with
};

class MixedPrecision {
 public:
  // master: fp32 leaves that the optimizer updates. compute: the model's parameters under the
  // same names and shapes, in compute_dtype(precision); for fp32, the same tensors as master.
  // The compute parameters are set from the master weights here.
  MixedPrecision(Precision precision, StateDict master, StateDict compute,
                 const LossScalerOptions& scaler = {});

  Precision precision() const { return precision_; }
  const StateDict& master() const { return master_; }
  const StateDict& compute() const { return compute_; }

  // The loss times the current loss scale (fp16); the loss itself otherwise.
  Tensor scale_loss(const Tensor& loss) const;
  double loss_scale() const;
  // fp16 only; nullptr otherwise.
  const DynamicLossScaler* scaler() const;

  // Adds each compute parameter's gradient, cast to fp32, into its master's and drops it.
  // Call after every backward pass.
  void accumulate_grads();
  // Updates the master weights through `optimizer` (built over master()) with the global norm
  // clipped to max_norm (<= 0: off), then rounds them into the compute parameters. fp16: a
  // non-finite norm skips the update and backs the scale off. Gradients stay; the caller zeroes
  // them (optimizer.zero_grad()) as in fp32.
  PrecisionStep step(Optimizer& optimizer, double max_norm);
  // Rounds the master weights into the compute parameters to nearest (at construction and
  // after loading a checkpoint into the master).
  void sync_compute();

  // bf16 only (throws otherwise): step() rounds the updated masters into the compute
  // parameters stochastically, with Philox bits keyed by seed (nn/optim/adamw.h); the
  // optimizer must then be an AdamW, which step() checks.
  void set_stochastic_rounding(uint64_t seed);
  bool stochastic_rounding() const { return stochastic_rounding_; }

  // The policy and the loss scaler's state, for checkpoints. load_state() restores the scaler
  // when both this policy and the saved one are fp16 (a run resumed under another policy
  // starts from a fresh scale); malformed state throws naming the key.
  nlohmann::json state() const;
  void load_state(const nlohmann::json& j);

 private:
  // optimizer.step(grad_scale), then the compute parameters set from the updated masters.
  void update(Optimizer& optimizer, double grad_scale);

  Precision precision_;
  StateDict master_, compute_;
  DynamicLossScaler scaler_;
  bool stochastic_rounding_ = false;
  uint64_t rounding_seed_ = 0;
};

}  // namespace tessera::nn
