#include "tessera/nn/optim/loss_scaler.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"

namespace tessera::nn {

void LossScalerOptions::validate() const {
  TESSERA_CHECK(std::isfinite(init_scale) && init_scale > 0.0,
                "loss scaler: init_scale must be finite and > 0, got ", init_scale);
  TESSERA_CHECK(std::isfinite(growth_factor) && growth_factor >= 1.0,
                "loss scaler: growth_factor must be finite and >= 1, got ", growth_factor);
  TESSERA_CHECK(backoff_factor > 0.0 && backoff_factor < 1.0,
                "loss scaler: backoff_factor must be in (0, 1), got ", backoff_factor);
  TESSERA_CHECK(growth_interval > 0, "loss scaler: growth_interval must be positive, got ",
                growth_interval);
  TESSERA_CHECK(std::isfinite(min_scale) && min_scale > 0.0 && min_scale <= init_scale,
                "loss scaler: min_scale must be in (0, init_scale], got ", min_scale);
}

DynamicLossScaler::DynamicLossScaler(const LossScalerOptions& options)
    : options_(options), scale_(options.init_scale) {
  options_.validate();
}

bool DynamicLossScaler::update(bool grads_finite) {
  if (!grads_finite) {
    scale_ = std::max(scale_ * options_.backoff_factor, options_.min_scale);
    clean_steps_ = 0;
    ++skipped_steps_;
    return false;
  }
  // >=: a run resumed with a shorter interval grows at its next clean step.
  if (++clean_steps_ >= options_.growth_interval) {
    const double grown = scale_ * options_.growth_factor;
    // A scale that would itself overflow fp32 arithmetic stays where it is.
    if (std::isfinite(grown)) scale_ = grown;
    clean_steps_ = 0;
  }
  return true;
}

nlohmann::json DynamicLossScaler::state() const {
  return {{"scale", scale_}, {"clean_steps", clean_steps_}, {"skipped_steps", skipped_steps_}};
}

void DynamicLossScaler::load_state(const nlohmann::json& j) {
  TESSERA_CHECK(j.is_object(), "loss scaler state: expected an object, got ", j.dump());
  TESSERA_CHECK(j.contains("scale") && j["scale"].is_number(),
                "loss scaler state: 'scale' must be a number, got ",
                j.contains("scale") ? j["scale"].dump() : "nothing");
  const double scale = j["scale"].get<double>();
  TESSERA_CHECK(std::isfinite(scale) && scale > 0.0,
                "loss scaler state: 'scale' must be finite and > 0, got ", scale);
  int64_t counts[2] = {0, 0};
  const char* keys[2] = {"clean_steps", "skipped_steps"};
  for (int i = 0; i < 2; ++i) {
    TESSERA_CHECK(
        j.contains(keys[i]) && j[keys[i]].is_number_integer() && j[keys[i]].get<int64_t>() >= 0,
        "loss scaler state: '", keys[i], "' must be a non-negative integer, got ",
        j.contains(keys[i]) ? j[keys[i]].dump() : "nothing");
    counts[i] = j[keys[i]].get<int64_t>();
  }
  scale_ = scale;
  clean_steps_ = counts[0];
  skipped_steps_ = counts[1];
}

}  // namespace tessera::nn
