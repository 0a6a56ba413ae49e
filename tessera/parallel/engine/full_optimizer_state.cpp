#include "tessera/parallel/engine/detail/full_optimizer_state.h"

#include <array>
#include <map>
#include <string>

#include "tessera/core/error.h"
#include "tessera/nn/init.h"
#include "tessera/parallel/engine/detail/full_model_state.h"

namespace tessera::parallel {

namespace {

// AdamW's per-parameter slots (nn::AdamW and ZeroAdamW name them so).
constexpr std::array<const char*, 2> kSlots = {"exp_avg", "exp_avg_sq"};

// `scalars` with each group's "params" replaced by the names `params` gives that group
// (nn::decay_groups, as nn::AdamW builds its groups); groups it does not know keep theirs.
nlohmann::json with_group_params(nlohmann::json scalars, const nn::StateDict& params) {
  if (!scalars.is_object() || !scalars.contains("groups") || !scalars["groups"].is_array())
    return scalars;
  std::map<std::string, nlohmann::json> names;
  for (const nn::ParamGroup& g : nn::decay_groups(params, 0.0)) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& [name, p] : g.params) list.push_back(name);
    names[g.name] = list;
  }
  for (nlohmann::json& g : scalars["groups"]) {
    if (!g.is_object() || !g.contains("name") || !g["name"].is_string()) continue;
    auto it = names.find(g["name"].get<std::string>());
    if (it != names.end()) g["params"] = it->second;
  }
  return scalars;
}

// The single-process scalars with their groups listing this rank's parameters.
nlohmann::json local_scalars(const nlohmann::json& full, const DataParallel& dp) {
  nn::StateDict params;
  for (const auto& p : dp.layout().params()) params.emplace_back(p.name, p.tensor);
  return with_group_params(full, params);
}

}  // namespace

void check_adamw_kind(const nlohmann::json& scalars) {
  TESSERA_CHECK(scalars.is_object() && scalars.value("kind", "") == "adamw",
                "optimizer state: 'kind' must be \"adamw\", got ",
                scalars.is_object() && scalars.contains("kind") ? scalars["kind"].dump()
                                                                : std::string("none"));
}

nn::OptimizerState gather_optimizer_state(const std::vector<std::shared_ptr<nn::GPT>>& chunks,
                                          const DeviceMesh& mesh, const DataParallel& dp) {
  const nn::OptimizerState local = dp.optimizer_state();
  std::array<nn::StateDict, kSlots.size()> full;
  for (size_t s = 0; s < kSlots.size(); ++s) {
    std::vector<nn::StateDict> moments;
    for (const auto& chunk : chunks) {
      nn::StateDict m;
      for (const auto& [name, p] : chunk->named_parameters())
        m.emplace_back(name, nn::find_tensor(local.tensors, name + "." + kSlots[s]));
      moments.push_back(std::move(m));
    }
    full[s] = gather_parameter_tensors(chunks, mesh, moments);
  }
  // The tensors in nn::AdamW::state_dict()'s order: groups, their parameters, the slots.
  nn::OptimizerState out;
  out.scalars = with_group_params(local.scalars, full[0]);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < full[0].size(); ++i) index[full[0][i].first] = i;
  for (const nn::ParamGroup& g : nn::decay_groups(full[0], 0.0))
    for (const auto& [name, p] : g.params)
      for (size_t s = 0; s < kSlots.size(); ++s)
        out.tensors.emplace_back(name + "." + kSlots[s], full[s][index.at(name)].second);
  return out;
}

void load_optimizer_state(const std::vector<std::shared_ptr<nn::GPT>>& chunks,
                          const DeviceMesh& mesh, DataParallel& dp,
                          const nn::OptimizerState& full) {
  check_adamw_kind(full.scalars);
  // Split the tensors by slot, so each slot's names and shapes are checked as the weights are.
  std::array<nn::StateDict, kSlots.size()> by_slot;
  for (const auto& [name, t] : full.tensors) {
    bool placed = false;
    for (size_t s = 0; s < kSlots.size(); ++s) {
      const std::string suffix = std::string(".") + kSlots[s];
      if (name.size() > suffix.size() && name.ends_with(suffix)) {
        by_slot[s].emplace_back(name.substr(0, name.size() - suffix.size()), t);
        placed = true;
        break;
      }
    }
    TESSERA_CHECK(placed, "optimizer state: unexpected tensor '", name,
                  "' (AdamW holds <parameter>.exp_avg and <parameter>.exp_avg_sq)");
  }
  for (size_t s = 0; s < kSlots.size(); ++s)
    check_model_state(chunks, mesh, by_slot[s], str_cat("optimizer state (", kSlots[s], ")"));

  // This rank's slices, named as DataParallel's parameters are.
  nn::OptimizerState local;
  local.scalars = local_scalars(full.scalars, dp);
  const int tp_rank = mesh.tp_rank(), tp = mesh.shape().size("tp");
  for (const auto& chunk : chunks)
    for (const auto& [name, meta] : chunk->named_parameter_meta())
      for (size_t s = 0; s < kSlots.size(); ++s) {
        const std::string key = name + "." + kSlots[s];
        local.tensors.emplace_back(
            key, nn::shard_of(nn::find_tensor(by_slot[s], name), meta, tp_rank, tp, key));
      }
  dp.load_optimizer_state(local);
}

void load_optimizer_scalars(DataParallel& dp, const nlohmann::json& full_scalars) {
  check_adamw_kind(full_scalars);
  dp.load_optimizer_scalars(local_scalars(full_scalars, dp));
}

}  // namespace tessera::parallel
