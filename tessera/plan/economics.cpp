#include "tessera/plan/economics.h"

#include <algorithm>
#include <cmath>

#include "tessera/core/error.h"
#include "tessera/plan/detail/text.h"

namespace tessera::plan {

CheckpointEconomics checkpoint_economics(int nodes, const FailureModel& f, double run_s) {
  TESSERA_CHECK(nodes >= 1, "plan: the job needs at least one node, got ", nodes);
  for (auto [v, what] :
       {std::pair{f.node_failures_per_day, "node failure rate per day"},
        std::pair{f.save_stall_s, "save stall (s)"}, std::pair{f.restart_s, "restart time (s)"},
        std::pair{f.write_s, "checkpoint write time (s)"}, std::pair{run_s, "run time"}})
    TESSERA_CHECK(std::isfinite(v) && v >= 0, "plan: the ", what, " must be >= 0, got ", v);
  CheckpointEconomics e;
  if (f.node_failures_per_day == 0) {  // nothing fails: save only at the end
    e.mtbf_s = INFINITY;
    e.goodput = 1;
    return e;
  }
  e.mtbf_s = 86400.0 / (nodes * f.node_failures_per_day);
  const double M = e.mtbf_s, d = f.save_stall_s, R = f.restart_s;
  // Young 1974: the minimum of waste(tau) above; a free save (d = 0) would save every
  // step: take one second.
  e.interval_s = std::max({1.0, d > 0 ? std::sqrt(2 * d * M) : 0.0, f.write_s});
  e.lost_per_failure_s = e.interval_s / 2 + R;
  e.waste = std::min(1.0, d / e.interval_s + e.lost_per_failure_s / M);
  e.goodput = 1 - e.waste;
  e.failures = run_s / M;
  return e;
}

void CheckpointInputs::validate() const {
  // The given figures within what clusters span, with a wide margin: a node failing every
  // 15 minutes, storage from 1 MB/s to 100 TB/s per node, a save or restart of 11 days.
  auto in_range = [](double v, const char* what, double lo, double hi) {
    detail::check_in_range(v, lo, hi, str_cat("plan: the ", what));
  };
  in_range(node_failures_per_day, "node failure rate (per node and day)", 0, 100);
  in_range(storage_gbps, "checkpoint storage bandwidth (GB/s per node)", 1e-3, 1e5);
  in_range(relaunch_s, "relaunch time (s)", 0, 1e6);
  if (save_stall_s != -1) in_range(save_stall_s, "save stall (s; -1: the write)", 0, 1e6);
  if (restart_s != -1) in_range(restart_s, "restart time (s; -1: relaunch and read back)", 0, 1e6);
}

CheckpointPlan plan_checkpoints(int64_t parameters, int nodes, double run_s,
                                const CheckpointInputs& in) {
  in.validate();
  TESSERA_CHECK(nodes >= 1, "plan: the job needs at least one node, got ", nodes);
  CheckpointPlan p;
  p.nodes = nodes;
  p.checkpoint_bytes = 12.0 * double(parameters);
  p.source = in.source;
  const double per_node_s = p.checkpoint_bytes / (double(nodes) * in.storage_gbps * 1e9);
  p.model.node_failures_per_day = in.node_failures_per_day;
  p.model.write_s = per_node_s;
  p.model.save_stall_s = in.save_stall_s != -1 ? in.save_stall_s : per_node_s;
  p.model.restart_s = in.restart_s != -1 ? in.restart_s : in.relaunch_s + per_node_s;
  p.economics = checkpoint_economics(nodes, p.model, run_s);
  return p;
}

}  // namespace tessera::plan
