#pragma once
// AdamW (Loshchilov & Hutter, decoupled weight decay) on the fused update ops::adamw_step_:
// one pass per parameter reads param, grad, m, v and writes param, m, v, with the gradient
// scaled (clipping) inside that pass. Parameters, grads and moments are f32. step_rounded()
// also writes each updated parameter, rounded, into a bf16/f16 copy in that same pass (mixed
// precision's compute weights), to nearest or stochastically.

#include <cstdint>
#include <vector>

#include "tessera/nn/optim/optimizer.h"

namespace tessera::nn {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  // for the groups decay_groups() builds
  void validate() const;
};

// How step_rounded() rounds into the copies. Stochastic (bf16 only): parameter k (in group
// order) draws its bits from Philox keyed by (seed mixed with k, step, element index), so a run
// is reproducible and every parameter and step gets its own stream.
struct RoundingOptions {
  bool stochastic = false;
  uint64_t seed = 0;
};

class AdamW : public Optimizer {
 public:
  // A model's parameters, split by decay_groups(): weight decay only on dim >= 2 tensors.
  AdamW(const StateDict& params, const AdamWOptions& options);
  // Explicit groups; each carries its own weight_decay (options.weight_decay is unused).
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options);

  void step(double grad_scale = 1.0) override;
  // step(grad_scale), and each updated parameter also rounded into the tensor of the same name
  // in `copies` (contiguous bf16 or f16 of its shape). Every parameter must have one; a
  // parameter without a gradient is left alone, and so is its copy.
  void step_rounded(double grad_scale, const StateDict& copies, const RoundingOptions& rounding);
  const AdamWOptions& options() const { return options_; }

 protected:
  std::vector<std::string> slot_names() const override { return {"exp_avg", "exp_avg_sq"}; }
  Tensor& slot(size_t group, size_t param, size_t slot) override;
  const Tensor& slot(size_t group, size_t param, size_t slot) const override;
  nlohmann::json hyperparameters() const override;
  void load_hyperparameters(const nlohmann::json& j) override;

 private:
  // The update; copies[group][param] undefined where nothing is rounded.
  void update(double grad_scale, const std::vector<std::vector<Tensor>>* copies,
              const RoundingOptions& rounding);

  AdamWOptions options_;
  std::vector<std::vector<Tensor>> m_, v_;  // [group][param], zeros like the parameter
};

}  // namespace tessera::nn
