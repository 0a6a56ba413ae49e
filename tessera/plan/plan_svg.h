#pragma once
// The picture of a plan: on the left, the per-GPU memory of the best layouts as stacked bars
// (parameters, gradients, optimizer state, activations, buffers) against the GPU's capacity;
// on the right, every layout that fits as a point of days (or step time, when no token count
// is given) against cost (or GPU-hours), one colour per GPU type, the ranked best ringed.

#include <string>

#include "tessera/plan/planner.h"

namespace tessera::plan {

std::string render_plan_svg(const PlanRequest& request, const PlanResult& result, int bars = 8);

}  // namespace tessera::plan
