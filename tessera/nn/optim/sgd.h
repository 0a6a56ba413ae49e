#pragma once
// SGD with momentum, as torch.optim.SGD (dampening 0, no Nesterov): with d = scale * grad +
// weight_decay * param, buf = momentum * buf + d (buf starts at zero, so the first step
// takes buf = d), then param -= lr * buf (or lr * d without momentum).

#include <vector>

#include "tessera/nn/optim/optimizer.h"

namespace tessera::nn {

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0.0;
  double weight_decay = 0.0;  // L2, added to the gradient; for decay_groups()
  void validate() const;
};

class SGD : public Optimizer {
 public:
  // A model's parameters, split by decay_groups().
  SGD(const StateDict& params, const SGDOptions& options);
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options);

  void step(double grad_scale = 1.0) override;
  const SGDOptions& options() const { return options_; }

 protected:
  std::vector<std::string> slot_names() const override;
  Tensor& slot(size_t group, size_t param, size_t slot) override;
  const Tensor& slot(size_t group, size_t param, size_t slot) const override;
  nlohmann::json hyperparameters() const override;
  void load_hyperparameters(const nlohmann::json& j) override;

 private:
  SGDOptions options_;
  std::vector<std::vector<Tensor>> buf_;  // [group][param]; empty without momentum
};

}  // namespace tessera::nn
