#pragma once
// A plan as text and JSON: the ranked table `tessera plan` prints, and the same rows (with
// every figure of memory and time) for scripts.

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "tessera/plan/economics.h"
#include "tessera/plan/planner.h"

namespace tessera::plan {

// The workload line, then one row per layout: rank, GPU, layout, GB per GPU (total and its
// parts), step time, MFU, TFLOP/s per GPU, tokens/s, days, GPU-hours and cost.
std::string format_plan_table(const PlanRequest& request, const PlanResult& result, int top);

// "checkpoints: 128 nodes at 0.05 failures per node-day fail every 3.75 h; ..." for a run of
// `days` (0: none given).
std::string format_checkpoints(const CheckpointPlan& p, double days);
nlohmann::json checkpoints_to_json(const CheckpointPlan& p);

nlohmann::json candidate_to_json(const PlanRequest& request, const Candidate& c);
nlohmann::json plan_to_json(const PlanRequest& request, const PlanResult& result, int top);

}  // namespace tessera::plan
