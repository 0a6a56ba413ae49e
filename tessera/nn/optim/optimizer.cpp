#include "tessera/nn/optim/optimizer.h"

#include <cmath>
#include <set>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/reduction.h"

namespace tessera::nn {

namespace {

void check_rate(double v, const std::string& what) {
  TESSERA_CHECK(std::isfinite(v) && v >= 0.0, "optimizer: ", what, " must be finite and >= 0, got ",
                v);
}

// A finite, non-negative number stored under `key` of object j.
double read_rate(const nlohmann::json& j, const std::string& key, const std::string& where) {
  TESSERA_CHECK(j.contains(key) && j[key].is_number(), "optimizer state: ", where, "'", key,
                "' must be a number", j.contains(key) ? ", got " + j[key].dump() : " (missing)");
  const double v = j[key].get<double>();
  TESSERA_CHECK(std::isfinite(v) && v >= 0.0, "optimizer state: ", where, "'", key,
                "' must be finite and >= 0, got ", v);
  return v;
}

}  // namespace

std::vector<ParamGroup> decay_groups(const StateDict& params, double weight_decay) {
  ParamGroup decay{"decay", {}, weight_decay, 1.0}, no_decay{"no_decay", {}, 0.0, 1.0};
  for (const auto& [name, p] : params)
    (p.dim() >= 2 ? decay : no_decay).params.emplace_back(name, p);
  std::vector<ParamGroup> groups;
  if (!decay.params.empty()) groups.push_back(std::move(decay));
  if (!no_decay.params.empty()) groups.push_back(std::move(no_decay));
  return groups;
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr, const char* kind)
    : groups_(std::move(groups)), lr_(lr), kind_(kind) {
  check_rate(lr, "lr");
  TESSERA_CHECK(!groups_.empty(), kind_, ": no parameter groups");
  std::set<std::string> group_names, param_names;
  std::set<const TensorImpl*> seen;
  for (const ParamGroup& g : groups_) {
    TESSERA_CHECK(group_names.insert(g.name).second, kind_, ": parameter group '", g.name,
                  "' appears twice");
    check_rate(g.weight_decay, "weight_decay of group '" + g.name + "'");
    check_rate(g.lr_scale, "lr_scale of group '" + g.name + "'");
    for (const auto& [name, p] : g.params) {
      TESSERA_CHECK(p.defined() && p.is_leaf() && p.requires_grad(), kind_, ": parameter '", name,
                    "' (", describe(p), ") must be a leaf that requires grad");
      TESSERA_CHECK(param_names.insert(name).second && seen.insert(p.impl_ptr()).second, kind_,
                    ": parameter '", name, "' appears twice");
    }
  }
}

void Optimizer::set_lr(double lr) {
  check_rate(lr, "lr");
  lr_ = lr;
}

void Optimizer::zero_grad() {
  for (const ParamGroup& g : groups_)
    for (const auto& [name, p] : g.params) p.set_grad(Tensor());
}

std::vector<Tensor> Optimizer::parameters() const {
  std::vector<Tensor> out;
  for (const ParamGroup& g : groups_)
    for (const auto& [name, p] : g.params) out.push_back(p);
  return out;
}

OptimizerState Optimizer::state_dict() const {
  OptimizerState s;
  const std::vector<std::string> slots = slot_names();
  nlohmann::json groups = nlohmann::json::array();
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    nlohmann::json names = nlohmann::json::array();
    for (size_t pi = 0; pi < g.params.size(); ++pi) {
      names.push_back(g.params[pi].first);
      for (size_t si = 0; si < slots.size(); ++si)
        s.tensors.emplace_back(g.params[pi].first + "." + slots[si], slot(gi, pi, si));
    }
    groups.push_back({{"name", g.name},
                      {"weight_decay", g.weight_decay},
                      {"lr_scale", g.lr_scale},
                      {"params", names}});
  }
  s.scalars = {{"kind", kind_},
               {"step", step_},
               {"lr", lr_},
               {"hyperparameters", hyperparameters()},
               {"groups", groups}};
  return s;
}

Optimizer::CheckedScalars Optimizer::check_scalars(const nlohmann::json& j) const {
  TESSERA_CHECK(j.is_object(), "optimizer state: scalars must be a JSON object, got ", j.dump());
  TESSERA_CHECK(j.contains("kind") && j["kind"].is_string() && j["kind"] == kind_,
                "optimizer state: 'kind' must be \"", kind_, "\", got ",
                j.contains("kind") ? j["kind"].dump() : "nothing");
  TESSERA_CHECK(
      j.contains("step") && j["step"].is_number_integer() && j["step"].get<int64_t>() >= 0,
      "optimizer state: 'step' must be a non-negative integer, got ",
      j.contains("step") ? j["step"].dump() : "nothing");
  CheckedScalars out;
  out.step = j["step"].get<int64_t>();
  out.lr = read_rate(j, "lr", "");
  TESSERA_CHECK(
      j.contains("groups") && j["groups"].is_array() && j["groups"].size() == groups_.size(),
      "optimizer state: 'groups' must be an array of ", groups_.size(), " groups, got ",
      j.contains("groups") ? j["groups"].dump().substr(0, 200) : "nothing");
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const nlohmann::json& g = j["groups"][gi];
    const ParamGroup& mine = groups_[gi];
    const std::string where = "group " + std::to_string(gi) + " ";
    TESSERA_CHECK(g.is_object() && g.contains("name") && g["name"] == mine.name,
                  "optimizer state: ", where, "must be named '", mine.name, "', got ",
                  g.dump().substr(0, 200));
    nlohmann::json names = nlohmann::json::array();
    for (const auto& [name, p] : mine.params) names.push_back(name);
    TESSERA_CHECK(g.contains("params") && g["params"] == names, "optimizer state: group '",
                  mine.name, "' lists other parameters than this optimizer's ", names.size());
    out.rates.emplace_back(read_rate(g, "weight_decay", where), read_rate(g, "lr_scale", where));
  }
  return out;
}

void Optimizer::apply_scalars(const nlohmann::json& j, const CheckedScalars& checked) {
  load_hyperparameters(j.contains("hyperparameters") ? j["hyperparameters"] : nlohmann::json());
  step_ = checked.step;
  lr_ = checked.lr;
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    groups_[gi].weight_decay = checked.rates[gi].first;
    groups_[gi].lr_scale = checked.rates[gi].second;
  }
}

void Optimizer::load_scalars(const nlohmann::json& scalars) {
  apply_scalars(scalars, check_scalars(scalars));
}

void Optimizer::load_state_dict(const OptimizerState& state) {
  const CheckedScalars checked = check_scalars(state.scalars);
  // Every tensor present with its parameter's shape, and nothing else.
  const OptimizerState mine = state_dict();
  std::set<std::string> known;
  for (const auto& [name, t] : mine.tensors) {
    known.insert(name);
    Tensor src = find_tensor(state.tensors, name);
    TESSERA_CHECK(src.defined(), "optimizer state: missing tensor '", name, "' (", t.describe(),
                  ")");
    TESSERA_CHECK(src.shape() == t.shape() && is_floating(src.dtype()), "optimizer state: '", name,
                  "' is ", src.describe(), " but the optimizer holds ", t.describe());
  }
  for (const auto& [name, t] : state.tensors)
    TESSERA_CHECK(known.count(name), "optimizer state: unexpected tensor '", name, "' (",
                  t.describe(), ")");
  apply_scalars(state.scalars, checked);
  NoGradGuard no_grad;
  for (const auto& [name, t] : mine.tensors) ops::copy_(t, find_tensor(state.tensors, name));
}

double global_grad_norm(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  return std::sqrt(ops::squared_norm(grads).item<double>());
}

double clip_factor(double norm, double max_norm) {
  if (max_norm <= 0.0 || norm <= max_norm) return 1.0;
  return max_norm / (norm + 1e-6);
}

double clip_and_step(Optimizer& optimizer, double max_norm, double extra_scale) {
  const double norm = global_grad_norm(optimizer.parameters());
  TESSERA_CHECK(std::isfinite(norm), "clip_and_step: the global gradient norm is ", norm,
                " at optimizer step ", optimizer.step_count() + 1, "; no parameter was updated");
  optimizer.step(clip_factor(norm, max_norm) * extra_scale);
  return norm;
}

}  // namespace tessera::nn
