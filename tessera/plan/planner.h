#pragma once
// `tessera plan`'s engine: every valid layout of a workload on one or more clusters, each
// with its per-GPU memory (memory_model.h) and step time (time_model.h), ranked by time or by
// cost among those that fit.
//
//   plan::PlanRequest r;
//   r.workload = {plan::plan_model("llama-70b-like"), "llama-70b-like", 4096, 1024, 2e12};
//   r.clusters = {plan::Cluster::of(plan::GpuTable::builtin().find("h100"), 1024)};
//   plan::PlanResult p = plan::plan(r);       // p.ranked[0]: the fastest layout that fits
//
// A layout is valid when the engine would run it (parallel::layout_error, the same check a
// training run makes) and fits when its fullest rank's estimate is within the GPU's memory.

#include <string>
#include <vector>

#include "tessera/plan/hardware.h"
#include "tessera/plan/layout.h"
#include "tessera/plan/memory_model.h"
#include "tessera/plan/time_model.h"

namespace tessera::plan {

struct Cluster {
  GpuSpec gpu;
  int gpus = 8;
  double usd_per_hour = 0;  // per GPU; the table's unless overridden

  static Cluster of(const GpuSpec& gpu, int gpus);
  int nodes() const { return (gpus + gpu.gpus_per_node - 1) / gpu.gpus_per_node; }
};

// Which layouts to try. A pinned size (> 0) or stage (>= 0) keeps only that choice.
struct SearchSpace {
  int tp = 0, pp = 0, dp = 0, virtual_stages = 0, micro_batch = 0, zero = -1;
  std::vector<nn::RecomputeMode> recompute = {nn::RecomputeMode::none, nn::RecomputeMode::selective,
                                              nn::RecomputeMode::full};
  bool try_sequence_parallel = true;
  bool try_offload = false;
  int max_virtual_stages = 8;
  int max_micro_batch = 32;
};

enum class RankBy { time, cost };

struct PlanRequest {
  Workload workload;
  std::vector<Cluster> clusters;
  SearchSpace space;
  MemoryOptions memory{2.5};  // GB kept for the CUDA context, cuBLAS workspace, NCCL buffers
  // A layout fits when its estimate is within this share of the GPU's memory: the caching
  // allocator's fragmentation and the libraries' workspaces vary by a few GB in practice.
  double usable_fraction = 0.9;
  EngineProfile engine = EngineProfile::tessera();
  RankBy rank_by = RankBy::time;
};

struct Candidate {
  int cluster = 0;          // index into PlanRequest::clusters
  double usable_bytes = 0;  // capacity x usable_fraction: what `fits` compares against
  Layout layout;
  MemoryEstimate memory;
  TimeEstimate time;
  double capacity_bytes = 0;
  bool fits = false;
  double mfu =
      0;  // model FLOPs (no recomputation) / (GPUs x peak x step); FP8's peak with fp8_gemms
  double tflops_per_gpu = 0;  // hardware FLOPs (recomputation included) per GPU and second
  double tokens_per_s = 0;
  double days = 0, gpu_hours = 0, cost_usd = 0;  // for the workload's tokens (0 when none)
};

struct PlanResult {
  std::vector<Candidate> ranked;  // the layouts that fit, best first
  int64_t considered = 0;         // layouts generated
  int64_t valid = 0;              // those the engine accepts
  Candidate smallest;             // the valid layout needing the least memory (fitting or not)
  std::string nothing_fits;       // "" when something fits; else one line saying why not
};

// Validates the request (one line naming what is wrong) and searches. Deterministic.
PlanResult plan(const PlanRequest& request);

// The estimate of one layout on one cluster (no validity check beyond what the models need).
Candidate evaluate(const Workload& w, const Layout& layout, const Cluster& cluster, int index,
                   const PlanRequest& request);

// The best candidate for each distinct (tp, pp) pair, best first: the form Narayanan et al.'s
// tables compare layouts in.
std::vector<Candidate> best_per_tp_pp(const PlanResult& result);

}  // namespace tessera::plan
