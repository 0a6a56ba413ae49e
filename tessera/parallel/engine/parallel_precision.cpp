#include "tessera/parallel/engine/parallel_precision.h"

#include <cmath>
#include <utility>
#include <vector>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/movement.h"

namespace tessera::parallel {

namespace {

// Moves a compute parameter's gradient into its fp32 master, as if the backward pass had
// produced it there (see the header).
void register_grad_bridge(const Tensor& compute, const Tensor& master) {
  autograd::register_post_accumulate_hook(compute, [master](const Tensor& c) {
    NoGradGuard no_grad;
    Tensor g = ops::contiguous(ops::cast(c.grad(), DType::f32));
    c.set_grad(Tensor());
    // The only handle to g, so AccumulateGrad adopts it instead of copying (ZeRO 2/3), or
    // adds it into the flat buffer view (ZeRO 0/1).
    std::vector<Tensor> grads;
    grads.push_back(std::move(g));
    autograd::make_accumulate_grad(master)->backward(grads);
  });
}

}  // namespace

ParallelPrecision::ParallelPrecision(nn::Precision precision, const nn::StateDict& master,
                                     const nn::StateDict& compute, DataParallel& dp,
                                     const nn::LossScalerOptions& scaler)
    : precision_(precision), master_(master), compute_(compute), dp_(&dp), scaler_(scaler) {
  const char* name = nn::precision_name(precision_);
  TESSERA_CHECK(master_.size() == compute_.size(), "parallel precision (", name,
                "): ", master_.size(), " master parameters but ", compute_.size(),
                " compute parameters");
  const DType want = nn::compute_dtype(precision_);
  for (size_t i = 0; i < master_.size(); ++i) {
    const auto& [mname, m] = master_[i];
    const auto& [cname, c] = compute_[i];
    TESSERA_CHECK(mname == cname, "parallel precision (", name, "): master parameter ", i, " is '",
                  mname, "' but compute parameter ", i, " is '", cname, "'");
    TESSERA_CHECK(m.defined() && m.dtype() == DType::f32 && m.is_leaf() && m.requires_grad(),
                  "parallel precision (", name, "): master '", mname,
                  "' must be an f32 leaf that requires grad, got ",
                  m.defined() ? m.describe() : std::string("undefined"));
    TESSERA_CHECK(c.defined() && c.dtype() == want && c.shape() == m.shape() &&
                      c.device() == m.device() && c.is_leaf() && c.requires_grad(),
                  "parallel precision (", name, "): parameter '", cname, "' is ",
                  c.defined() ? c.describe() : std::string("undefined"), " but its master is ",
                  m.describe(), " (expected a ", dtype_name(want),
                  " leaf that requires grad, same shape and device)");
    TESSERA_CHECK(precision_ != nn::Precision::fp32 || c.is_same(m), "parallel precision (fp32): '",
                  cname, "' must be the master tensor itself");
    TESSERA_CHECK(!dp.offloaded() || precision_ != nn::Precision::fp32,
                  "parallel precision (fp32): an offloaded optimizer keeps the master off the ",
                  "device, and under fp32 the model computes with the master itself (use bf16 or ",
                  "fp16)");
    if (precision_ != nn::Precision::fp32) register_grad_bridge(c, m);
  }
  sync_compute();
}

double ParallelPrecision::loss_scale() const {
  return precision_ == nn::Precision::fp16 ? scaler_.scale() : 1.0;
}

const nn::DynamicLossScaler* ParallelPrecision::scaler() const {
  return precision_ == nn::Precision::fp16 ? &scaler_ : nullptr;
}

PrecisionStepResult ParallelPrecision::step() {
  PrecisionStepResult out;
  out.loss_scale = loss_scale();
  // Unscaling by the reciprocal equals one process's division exactly when the scale is a
  // power of two (the default 2^16 and its halvings and doublings); otherwise within a rounding.
  out.update = dp_->step(1.0 / out.loss_scale);
  if (precision_ == nn::Precision::fp16) {
    // Every rank sees the same global norm, so every rank's scaler takes the same path.
    out.skipped = !scaler_.update(out.update.finite);
  }
  if (out.update.finite) sync_compute();
  return out;
}

void ParallelPrecision::sync_compute() {
  if (precision_ == nn::Precision::fp32) return;
  NoGradGuard no_grad;
  // ZeRO-3 shards the compute copy too: each rank rounds its own shard, no gather.
  if (dp_->shards_compute()) return dp_->sync_compute_shards();
  // Offloaded, the host rounded the master already: gather those 16-bit shards instead.
  if (dp_->offloaded()) return dp_->gather_rounded(compute_);
  // ZeRO-3 holds only a shard of the master: gather it for the copy and free it again.
  dp_->gather_parameters();
  for (size_t i = 0; i < master_.size(); ++i) ops::copy_(compute_[i].second, master_[i].second);
  dp_->release_parameters();
}

int64_t ParallelPrecision::compute_bytes() const {
  if (precision_ == nn::Precision::fp32) return 0;
  if (dp_->shards_compute()) return dp_->memory().compute;
  int64_t bytes = 0;
  for (const auto& [name, c] : compute_) bytes += c.nbytes();
  return bytes;
}

int64_t ParallelPrecision::compute_peak_bytes() const {
  if (dp_->shards_compute()) return dp_->memory().compute_peak;
  return compute_bytes();
}

nlohmann::json ParallelPrecision::state() const {
  nlohmann::json j = {{"precision", nn::precision_name(precision_)}};
  if (precision_ == nn::Precision::fp16) j["loss_scaler"] = scaler_.state();
  return j;
}

void ParallelPrecision::load_state(const nlohmann::json& j) {
  TESSERA_CHECK(j.is_object() && j.contains("precision") && j["precision"].is_string(),
                "precision state: expected an object with a 'precision' string, got ",
                j.dump().substr(0, 200));
  const nn::Precision saved = nn::parse_precision(j["precision"].get<std::string>());
  if (saved != nn::Precision::fp16 || precision_ != nn::Precision::fp16) return;
  TESSERA_CHECK(j.contains("loss_scaler"), "precision state: an fp16 run's state has no ",
                "'loss_scaler'");
  scaler_.load_state(j["loss_scaler"]);
}

}  // namespace tessera::parallel
