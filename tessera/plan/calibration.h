#pragma once
// Calibration from a real run: `tessera plan --calibrate RUN_DIR` reads what the engine
// measured (config.json, metrics.jsonl's per-phase times, bytes sent and memory per rank,
// checkpoints.jsonl's save stalls, restarts.jsonl's recoveries) and fits the planner's two
// assumed constants to them:
//
//  - compute: the GEMM efficiency at which the model's FLOPs plus its elementwise bytes take
//    the ranks' busy compute time (step less blocked communication and the optimizer);
//  - communication: the bandwidth at which each rank's bytes on the wire take its blocked
//    communication time (a floor: blocked time includes waiting for late peers).
//
// Memory is not fitted but checked: the run's model states must equal the planner's to the
// byte, and its activations are shown beside the prediction. Later plans for the same
// hardware then use measured, not assumed, figures; what a run cannot measure (a single-node
// run has no inter-node link) is kept from the table and named.

#include <string>
#include <vector>

#include "tessera/plan/hardware.h"
#include "tessera/plan/layout.h"
#include "tessera/plan/memory_model.h"
#include "tessera/plan/time_model.h"

namespace tessera::plan {

struct Calibration {
  std::string run_dir;
  Workload workload;   // the run's model, batch, sequence and precision
  Layout layout;       // its dp x tp x pp, ZeRO stage, schedule, recomputation
  std::string device;  // "cpu" or "cuda:0"
  int64_t steps = 0;   // metrics lines used (after the warm-up ones)
  int ranks = 1;

  // Medians over the steps used, of the slowest rank each step.
  double step_s = 0, compute_s = 0, comm_s = 0, optimizer_s = 0;
  double comm_bytes = 0;       // per rank and step, on the wire
  double flops_per_rank = 0;   // hardware FLOPs a rank runs per step
  double achieved_tflops = 0;  // flops_per_rank / compute_s
  double gemm_efficiency = 0;  // fitted
  double comm_gbps = 0;        // fitted (0: the run sent nothing)

  // Rank 0's memory as measured (-1: the run did not log it) and as planned.
  int64_t measured_parameters = -1, measured_gradients = -1, measured_optimizer = -1;
  int64_t measured_activations = -1;
  ModelStates planned_states;
  MemoryEstimate planned_memory;

  double save_stall_s = -1;  // median of checkpoints.jsonl's stall_ms (-1: no save logged)
  double restart_s = -1;     // median seconds_to_recover of restarts.jsonl (-1: none)

  GpuSpec calibrated;              // the base spec with the fitted figures
  std::vector<std::string> notes;  // what was kept from the table, and why
};

// `gpu` is the GPU type a CUDA run ran on (a table entry); null for a CPU run, which is
// calibrated against cpu_spec(). Throws in one line when the two disagree (a CUDA run with no
// GPU named, a CPU run with one), or naming the file and line when the run directory lacks
// what calibration needs. The first `skip_steps` steps (warm-up) are left out.
Calibration calibrate(const std::string& run_dir, const GpuSpec* gpu, int skip_steps = 2);

// This machine's CPU as a GpuSpec: its nominal fp32 peak (train::cpu_peak_gflops) for all its
// cores, its memory (/proc/meminfo), and links inside one node only.
GpuSpec cpu_spec();

// The report `tessera plan --calibrate` prints: measured against planned for the run itself.
std::string format_calibration(const Calibration& c);

}  // namespace tessera::plan
