#pragma once
// Layout: one way to run a workload on a cluster, in the engine's own terms (ParallelConfig):
// the mesh dp x pp x tp (tp fastest, so a tensor-parallel group stays inside a node), virtual
// stages and micro-batches of the pipeline schedule, the ZeRO stage, recomputation, sequence
// parallelism and optimizer offload.

#include <string>

#include "tessera/nn/recompute.h"
#include "tessera/parallel/engine/parallel_config.h"
#include "tessera/plan/workload.h"

namespace tessera::plan {

struct Layout {
  int dp = 1, tp = 1, pp = 1;
  int virtual_stages = 1;  // model chunks per pipeline rank (interleaved 1F1B when > 1)
  int microbatches = 1;    // M per dp rank and step
  int zero = 0;
  nn::Recompute recompute;
  bool sequence_parallel = false;
  bool offload = false;

  int gpus() const { return dp * tp * pp; }
  // Sequences per micro-batch: B / (dp M).
  int64_t micro_batch(const Workload& w) const {
    return w.global_batch / (int64_t(dp) * microbatches);
  }
  parallel::ScheduleKind schedule() const {
    return virtual_stages > 1 ? parallel::ScheduleKind::interleaved
                              : parallel::ScheduleKind::one_f_one_b;
  }
  // The engine's config for this layout (on a CUDA device under the workload's precision), so
  // that parallel::layout_error decides what is valid, as it does for a real run.
  parallel::ParallelConfig to_parallel_config(const Workload& w) const;
  // "", or why the engine would refuse it (parallel::layout_error's line).
  std::string invalid_reason(const Workload& w) const;
  // "dp16 tp8 pp4 v2 m8 b4 ZeRO-1 full"; the micro-batch size needs the workload.
  std::string describe(const Workload& w) const;
  // The same as flags of `tessera train`.
  std::string train_flags() const;
};

}  // namespace tessera::plan
