#include "tessera/nn/optim/mixed_precision.h"

#include <cmath>

#include "tessera/autograd/functions/elementwise.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/movement.h"
#include "tessera/nn/optim/adamw.h"

namespace tessera::nn {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  if (name == "fp16") return Precision::fp16;
  detail::throw_error("precision must be fp32, bf16 or fp16, got '", name, "'");
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::bf16:
      return "bf16";
    case Precision::fp16:
      return "fp16";
    default:
      return "fp32";
  }
}

DType compute_dtype(Precision precision) {
  switch (precision) {
    case Precision::bf16:
      return DType::bf16;
    case Precision::fp16:
      return DType::f16;
    default:
      return DType::f32;
  }
}

MixedPrecision::MixedPrecision(Precision precision, StateDict master, StateDict compute,
                               const LossScalerOptions& scaler)
    : precision_(precision),
      master_(std::move(master)),
      compute_(std::move(compute)),
      scaler_(scaler) {
  const char* name = precision_name(precision_);
  TESSERA_CHECK(master_.size() == compute_.size(), "mixed precision (", name, "): ", master_.size(),
                " master parameters but ", compute_.size(), " compute parameters");
  const DType want = compute_dtype(precision_);
  for (size_t i = 0; i < master_.size(); ++i) {
    const auto& [mname, m] = master_[i];
    const auto& [cname, c] = compute_[i];
    TESSERA_CHECK(mname == cname, "mixed precision (", name, "): master parameter ", i, " is '",
                  mname, "' but compute parameter ", i, " is '", cname, "'");
    TESSERA_CHECK(m.defined() && m.dtype() == DType::f32 && m.is_leaf() && m.requires_grad(),
                  "mixed precision (", name, "): master '", mname,
                  "' must be an f32 leaf that requires grad, got ", describe(m));
    TESSERA_CHECK(
        c.defined() && c.dtype() == want && c.shape() == m.shape() && c.device() == m.device(),
        "mixed precision (", name, "): parameter '", cname, "' is ", describe(c),
        " but its master is ", describe(m), " (expected ", dtype_name(want),
        ", same shape and device)");
    TESSERA_CHECK(precision_ != Precision::fp32 || c.is_same(m), "mixed precision (fp32): '", cname,
                  "' must be the master tensor itself");
  }
  sync_compute();
}

Tensor MixedPrecision::scale_loss(const Tensor& loss) const {
  if (precision_ != Precision::fp16) return loss;
  return tessera::mul(loss, scaler_.scale());
}

double MixedPrecision::loss_scale() const {
  return precision_ == Precision::fp16 ? scaler_.scale() : 1.0;
}

const DynamicLossScaler* MixedPrecision::scaler() const {
  return precision_ == Precision::fp16 ? &scaler_ : nullptr;
}

void MixedPrecision::accumulate_grads() {
  if (precision_ == Precision::fp32) return;  // the gradients are already the master's
  NoGradGuard no_grad;
  for (size_t i = 0; i < master_.size(); ++i) {
    const Tensor& c = compute_[i].second;
    const Tensor g = c.grad();
    if (!g.defined()) continue;
    const Tensor& m = master_[i].second;
    if (m.grad().defined()) {
      ops::add_(m.grad(), g);
    } else {
      m.set_grad(ops::contiguous(ops::cast(g, DType::f32)));
    }
    c.set_grad(Tensor());
  }
}

PrecisionStep MixedPrecision::step(Optimizer& optimizer, double max_norm) {
  PrecisionStep out;
  out.loss_scale = loss_scale();
  if (precision_ != Precision::fp16) {
    // clip_and_step's checks, with update() in place of optimizer.step().
    out.grad_norm = global_grad_norm(optimizer.parameters());
    TESSERA_CHECK(std::isfinite(out.grad_norm), "mixed precision (", precision_name(precision_),
                  "): the global gradient norm is ", out.grad_norm, " at optimizer step ",
                  optimizer.step_count() + 1, "; no parameter was updated");
    update(optimizer, clip_factor(out.grad_norm, max_norm));
  } else {
    // The norm of the scaled gradients is finite exactly when every element is: one inf or nan
    // anywhere makes the sum of squares inf or nan (fp16 overflow arrives as inf).
    const double scaled = global_grad_norm(optimizer.parameters());
    out.grad_norm = scaled / out.loss_scale;
    if (!scaler_.update(std::isfinite(scaled))) {
      out.skipped = true;
      return out;
    }
    update(optimizer, clip_factor(out.grad_norm, max_norm) / out.loss_scale);
  }
  return out;
}

void MixedPrecision::update(Optimizer& optimizer, double grad_scale) {
  auto* adamw = dynamic_cast<AdamW*>(&optimizer);
  TESSERA_CHECK(!stochastic_rounding_ || adamw, "mixed precision (bf16): stochastic rounding is ",
                "done by the fused AdamW update; this optimizer is not an AdamW");
  if (precision_ == Precision::fp32) {
    optimizer.step(grad_scale);
  } else if (adamw) {
    adamw->step_rounded(grad_scale, compute_,
                        RoundingOptions{stochastic_rounding_, rounding_seed_});
  } else {
    optimizer.step(grad_scale);
    sync_compute();
  }
}

void MixedPrecision::set_stochastic_rounding(uint64_t seed) {
  TESSERA_CHECK(precision_ == Precision::bf16, "mixed precision: stochastic rounding rounds the ",
                "master weights to bf16, so it needs the bf16 policy, not ",
                precision_name(precision_));
  stochastic_rounding_ = true;
  rounding_seed_ = seed;
}

void MixedPrecision::sync_compute() {
  if (precision_ == Precision::fp32) return;
  NoGradGuard no_grad;
  for (size_t i = 0; i < master_.size(); ++i) ops::copy_(compute_[i].second, master_[i].second);
}

nlohmann::json MixedPrecision::state() const {
  nlohmann::json j = {{"precision", precision_name(precision_)}};
  if (precision_ == Precision::fp16) j["loss_scaler"] = scaler_.state();
  return j;
}

void MixedPrecision::load_state(const nlohmann::json& j) {
  TESSERA_CHECK(j.is_object() && j.contains("precision") && j["precision"].is_string(),
                "precision state: expected an object with a 'precision' string, got ",
                j.dump().substr(0, 200));
  const Precision saved = parse_precision(j["precision"].get<std::string>());
  if (saved != Precision::fp16 || precision_ != Precision::fp16) return;
  TESSERA_CHECK(j.contains("loss_scaler"), "precision state: an fp16 run's state has no ",
                "'loss_scaler'");
  scaler_.load_state(j["loss_scaler"]);
}

}  // namespace tessera::nn
