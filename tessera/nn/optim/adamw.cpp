#include "tessera/nn/optim/adamw.h"

#include <cmath>
#include <string_view>
#include <unordered_map>

#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/optim.h"

namespace tessera::nn {

void AdamWOptions::validate() const {
  TESSERA_CHECK(std::isfinite(lr) && lr >= 0.0, "AdamW: lr must be finite and >= 0, got ", lr);
  TESSERA_CHECK(beta1 >= 0.0 && beta1 < 1.0 && beta2 >= 0.0 && beta2 < 1.0,
                "AdamW: betas must be in [0, 1), got (", beta1, ", ", beta2, ")");
  TESSERA_CHECK(std::isfinite(eps) && eps > 0.0, "AdamW: eps must be finite and > 0, got ", eps);
  TESSERA_CHECK(std::isfinite(weight_decay) && weight_decay >= 0.0,
                "AdamW: weight_decay must be finite and >= 0, got ", weight_decay);
}

AdamW::AdamW(const StateDict& params, const AdamWOptions& options)
    : AdamW(decay_groups(params, options.weight_decay), options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : Optimizer(std::move(groups), options.lr, "adamw"), options_(options) {
  options_.validate();
  for (const ParamGroup& g : groups_) {
    m_.emplace_back();
    v_.emplace_back();
    for (const auto& [name, p] : g.params) {
      TESSERA_CHECK(p.dtype() == DType::f32 && p.is_contiguous(), "AdamW: parameter '", name,
                    "' must be a contiguous f32 tensor (master weights), got ", p.describe());
      m_.back().push_back(zeros(p.shape(), DType::f32, p.device()));
      v_.back().push_back(zeros(p.shape(), DType::f32, p.device()));
    }
  }
}

void AdamW::step(double grad_scale) {
  update(grad_scale, nullptr, RoundingOptions{});
}

void AdamW::step_rounded(double grad_scale, const StateDict& copies,
                         const RoundingOptions& rounding) {
  std::unordered_map<std::string_view, const Tensor*> by_name;
  for (const auto& [name, t] : copies) by_name.emplace(name, &t);
  std::vector<std::vector<Tensor>> matched(groups_.size());
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    for (const auto& [name, p] : groups_[gi].params) {
      auto it = by_name.find(name);
      TESSERA_CHECK(it != by_name.end(), "AdamW: no rounded copy for parameter '", name, "' (",
                    p.describe(), ") among the ", copies.size(), " given");
      matched[gi].push_back(*it->second);
    }
  }
  update(grad_scale, &matched, rounding);
}

void AdamW::update(double grad_scale, const std::vector<std::vector<Tensor>>* copies,
                   const RoundingOptions& rounding) {
  ++step_;
  AdamWArgs args;
  args.beta1 = float(options_.beta1);
  args.beta2 = float(options_.beta2);
  args.eps = float(options_.eps);
  args.step = step_;
  args.grad_scale = float(grad_scale);
  args.stochastic_rounding = rounding.stochastic;
  uint64_t index = 0;  // the parameter's position in group order
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    args.lr = float(lr_ * g.lr_scale);
    args.weight_decay = float(g.weight_decay);
    for (size_t pi = 0; pi < g.params.size(); ++pi, ++index) {
      const Tensor& p = g.params[pi].second;
      const Tensor grad = p.grad();  // contiguous in practice; the op checks
      if (!grad.defined()) continue;
      // Distinct per parameter; rounding_key() then mixes in the step.
      args.rounding_seed = rounding.seed + index * 0x9E3779B97F4A7C15ull;
      ops::adamw_step_(p, grad, m_[gi][pi], v_[gi][pi], args,
                       copies ? (*copies)[gi][pi] : Tensor());
    }
  }
}

Tensor& AdamW::slot(size_t group, size_t param, size_t slot) {
  return (slot == 0 ? m_ : v_)[group][param];
}

const Tensor& AdamW::slot(size_t group, size_t param, size_t slot) const {
  return (slot == 0 ? m_ : v_)[group][param];
}

nlohmann::json AdamW::hyperparameters() const {
  return {{"beta1", options_.beta1},
          {"beta2", options_.beta2},
          {"eps", options_.eps},
          {"weight_decay", options_.weight_decay}};
}

void AdamW::load_hyperparameters(const nlohmann::json& j) {
  TESSERA_CHECK(j.is_object(), "optimizer state: 'hyperparameters' must be an object, got ",
                j.dump());
  AdamWOptions o = options_;
  for (auto [key, field] : {std::pair{"beta1", &o.beta1}, std::pair{"beta2", &o.beta2},
                            std::pair{"eps", &o.eps}, std::pair{"weight_decay", &o.weight_decay}}) {
    TESSERA_CHECK(j.contains(key) && j[key].is_number(), "optimizer state: hyperparameter '", key,
                  "' must be a number, got ", j.contains(key) ? j[key].dump() : "nothing");
    *field = j[key].get<double>();
  }
  o.validate();
  options_ = o;
}

}  // namespace tessera::nn
