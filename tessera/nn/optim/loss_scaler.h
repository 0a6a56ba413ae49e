#pragma once
// DynamicLossScaler: the loss scale of fp16 training. fp16 keeps 5 exponent bits, so small
// gradients (below 6e-8) flush to zero; multiplying the loss by a large scale S lifts every
// gradient by S into fp16's range, and the update divides by S again. Too large a scale
// overflows: the step is then skipped (the weights and optimizer state stay as they are) and S
// is multiplied by backoff_factor. After growth_interval clean steps in a row S is multiplied by
// growth_factor, so the scale tracks the largest one that does not overflow.
//
// The state (scale, clean steps in a row, steps skipped in total) goes into checkpoints as
// JSON; every scale is init_scale times a power of two, so it round-trips bit-exactly.

#include <cstdint>

#include <nlohmann/json.hpp>

namespace tessera::nn {

struct LossScalerOptions {
  double init_scale = 65536.0;  // 2^16, PyTorch GradScaler's default
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // clean steps in a row before the scale grows
  double min_scale = 1.0;          // backing off never goes below this
  // Throws naming the field and value.
  void validate() const;
};

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(const LossScalerOptions& options = {});

  double scale() const { return scale_; }
  int64_t clean_steps() const { return clean_steps_; }
  int64_t skipped_steps() const { return skipped_steps_; }
  const LossScalerOptions& options() const { return options_; }

  // Records one step whose (scaled) gradients were all finite or not. Returns true when the
  // step may be applied; false when it must be skipped (the scale has then backed off).
  bool update(bool grads_finite);

  nlohmann::json state() const;
  // Restores state(); throws naming the key before changing anything.
  void load_state(const nlohmann::json& j);

 private:
  LossScalerOptions options_;
  double scale_;
  int64_t clean_steps_ = 0;
  int64_t skipped_steps_ = 0;
};

}  // namespace tessera::nn
