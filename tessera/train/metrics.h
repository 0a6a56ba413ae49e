#pragma once
// Training metrics: the per-step record, its console line and JSONL form, model FLOPs for MFU,
// the CPU's nominal peak, and process memory.

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/nn/gpt_config.h"

namespace tessera::train {

// The version of metrics.jsonl's lines (each carries "metrics_version"; docs/formats.md).
inline constexpr int64_t kMetricsVersion = 1;

// One rank's step by phase, in milliseconds. forward, backward and optimizer each include the
// communication the rank blocked in during it; comm_ms is that communication's sum, so a rank's
// own (busy) compute is step_ms - comm_ms, and its data loading data_ms.
struct PhaseTimes {
  double data_ms = 0, forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  double step_ms = 0;  // the engine's step, from the batch in hand to the update done
  double busy_compute_ms(double comm_ms) const;
};

// Bytes one rank holds under a parallel layout (the engine's RankMemory) and its time blocked
// in communication this step.
struct RankMetrics {
  double comm_ms = 0;
  int64_t comm_bytes = 0;  // sent this step, as a ring sends it (parallel/comm/traffic.h)
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t activation_bytes = 0;  // peak during forward and backward
  // The rank's device allocator (the CUDA pool's counters on a GPU): live and peak bytes.
  int64_t device_live_bytes = 0;
  int64_t device_peak_bytes = 0;
  // --offload optimizer: host bytes of the master shard, moments and transfer buffers.
  int64_t host_optimizer_bytes = 0;
  PhaseTimes phases;

  nlohmann::json to_json() const;
};

// What a parallel step adds to the record: the measured pipeline bubble (idle / busy of the
// pipeline group) and every rank's RankMetrics, rank 0 first.
struct ParallelMetrics {
  double bubble = 0;
  std::vector<RankMetrics> ranks;
};

struct StepMetrics {
  int64_t step = 0;  // 1-based: the number of optimizer steps taken
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double ms = 0;
  double tokens_per_s = 0;
  double mfu = 0;          // fraction of the stated peak
  int64_t live_bytes = 0;  // tensor memory in use (the device allocator)
  int64_t peak_bytes = 0;  // its high-water mark
  int64_t rss_bytes = 0;   // the process's resident set
  std::optional<double> val_loss;
  std::string precision = "fp32";           // the policy (console line shows it unless fp32)
  std::optional<double> loss_scale;         // fp16: the scale this step's backward used
  bool skipped = false;                     // fp16: this step overflowed and changed no weight
  int64_t skipped_steps = 0;                // fp16: overflowed steps so far
  std::optional<ParallelMetrics> parallel;  // under a parallel layout
  // A checkpoint streamed from the live state: how long this step's update waited for its
  // bytes to be written (this rank's; 0 when the write finished during forward and backward).
  std::optional<double> snapshot_wait_ms;
  // When the step ended (Unix seconds), this rank's phases and exposed communication, and the
  // stall of the checkpoint saved after it (rank 0's, 0 when none).
  double time = 0;
  PhaseTimes phases;
  double comm_ms = 0;
  double checkpoint_ms = 0;
  // Stragglers flagged at this step (stragglers.h): one line each.
  std::vector<std::string> stragglers;

  nlohmann::json to_json() const;
  std::string console_line(int64_t max_steps) const;
  // The record as TensorBoard scalars, tagged by group ("loss/train", "perf/mfu",
  // "parallel/rank1/comm_ms", ...): what --tensorboard writes (tensorboard.h, docs/formats.md).
  std::vector<std::pair<std::string, double>> scalars() const;
  // The live line of a terminal: "step 37/1000 3.7% | loss 2.4512 | 12345 tok/s | elapsed
  // 0:01:23 | ETA 0:35:10", with elapsed and remaining seconds from the caller.
  std::string progress_line(int64_t max_steps, double elapsed_s, double eta_s) const;
};

// Training FLOPs per token, nanoGPT's estimate: 6 * N + 12 * L * C * T, with N the parameters
// that take part in matmuls (all but the position embedding) and T the sequence length.
// h:mm:ss (or "--:--" for a time not known yet: negative or not finite).
std::string clock_text(double seconds);

double flops_per_token(const nn::GPTConfig& config, int64_t seq_len);

// The nominal fp32 peak of `threads` cores of this CPU in GFLOP/s: GHz (from /proc/cpuinfo)
// times the core's fp32 FLOPs per cycle (cpu_fp32_flops_per_cycle). *description receives how
// it was computed, for the startup banner.
double cpu_peak_gflops(int threads, std::string* description);

// A core's fp32 FLOPs per cycle, from /proc/cpuinfo's text (its first processor): the FMA
// pipes' width times their count times 2, by vendor and family where the ISA alone misleads.
//   AVX-512, Intel                    64  two 512-bit FMA ports (Xeon Gold 6xxx, Platinum;
//                                         some Silver and Gold 5xxx parts have one: 32)
//   AVX-512, AMD family 25 (Zen 4)    32  a 512-bit FMA issues over its two 256-bit pipes
//   AVX-512, AMD family 26+ (Zen 5)   64  512-bit pipes
//   AVX2 + FMA, AMD family 23, model < 0x30 (Zen, Zen+)  16  two 128-bit pipes
//   AVX2 + FMA, otherwise             32  two 256-bit FMA pipes (Haswell on, Zen 2 and 3)
//   neither                            8  SSE: a 4-wide multiply and add a cycle
// *isa receives the row's name.
int cpu_fp32_flops_per_cycle(const std::string& cpuinfo, std::string* isa);

int64_t process_rss_bytes();

// An append-only JSONL file: one object per line, flushed after each, so a crash loses at
// most the line being written. truncate_after() rewrites it (atomically) without the lines of
// steps after `step`, which a resumed run is about to redo.
class MetricsLog {
 public:
  explicit MetricsLog(const std::string& path);
  void append(const nlohmann::json& record);
  static void truncate_after(const std::string& path, int64_t step);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace tessera::train
