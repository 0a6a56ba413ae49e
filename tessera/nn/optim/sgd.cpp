#include "tessera/nn/optim/sgd.h"

#include <cmath>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/movement.h"

namespace tessera::nn {

void SGDOptions::validate() const {
  TESSERA_CHECK(std::isfinite(lr) && lr >= 0.0, "SGD: lr must be finite and >= 0, got ", lr);
  TESSERA_CHECK(momentum >= 0.0 && momentum < 1.0, "SGD: momentum must be in [0, 1), got ",
                momentum);
  TESSERA_CHECK(std::isfinite(weight_decay) && weight_decay >= 0.0,
                "SGD: weight_decay must be finite and >= 0, got ", weight_decay);
}

SGD::SGD(const StateDict& params, const SGDOptions& options)
    : SGD(decay_groups(params, options.weight_decay), options) {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& options)
    : Optimizer(std::move(groups), options.lr, "sgd"), options_(options) {
  options_.validate();
  for (const ParamGroup& g : groups_) {
    buf_.emplace_back();
    if (options_.momentum > 0.0)
      for (const auto& [name, p] : g.params) buf_.back().push_back(zeros_like(p));
  }
}

void SGD::step(double grad_scale) {
  ++step_;
  NoGradGuard no_grad;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    const double lr = lr_ * g.lr_scale;
    for (size_t pi = 0; pi < g.params.size(); ++pi) {
      const Tensor& p = g.params[pi].second;
      if (!p.grad().defined()) continue;
      Tensor d = ops::mul(p.grad(), grad_scale);
      if (g.weight_decay != 0.0) ops::add_(d, ops::mul(p, g.weight_decay));
      if (options_.momentum > 0.0) {
        Tensor& buf = buf_[gi][pi];
        ops::mul_(buf, options_.momentum);
        ops::add_(buf, d);
        d = buf;
      }
      ops::add_(p, ops::mul(d, -lr));
    }
  }
}

std::vector<std::string> SGD::slot_names() const {
  if (options_.momentum > 0.0) return {"momentum_buffer"};
  return {};
}

Tensor& SGD::slot(size_t group, size_t param, size_t) {
  return buf_[group][param];
}

const Tensor& SGD::slot(size_t group, size_t param, size_t) const {
  return buf_[group][param];
}

nlohmann::json SGD::hyperparameters() const {
  return {{"momentum", options_.momentum}, {"weight_decay", options_.weight_decay}};
}

void SGD::load_hyperparameters(const nlohmann::json& j) {
  TESSERA_CHECK(j.is_object() && j.contains("momentum") && j["momentum"].is_number(),
                "optimizer state: SGD hyperparameters need a number 'momentum', got ", j.dump());
  // The momentum buffers exist or not by construction; the state must agree.
  TESSERA_CHECK((j["momentum"].get<double>() > 0.0) == (options_.momentum > 0.0),
                "optimizer state: momentum ", j["momentum"].dump(), " does not match this SGD's ",
                options_.momentum, " (one has momentum buffers, the other none)");
  TESSERA_CHECK(j.contains("weight_decay") && j["weight_decay"].is_number(),
                "optimizer state: SGD hyperparameters need a number 'weight_decay', got ",
                j.dump());
  SGDOptions o = options_;
  o.momentum = j["momentum"].get<double>();
  o.weight_decay = j["weight_decay"].get<double>();
  o.validate();
  options_ = o;
}

}  // namespace tessera::nn
