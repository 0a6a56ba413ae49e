#pragma once
// Failure and checkpoint economics (docs/resilience.md has the derivation): a job on N nodes,
// each failing at rate λ per day, fails every M = 86,400 / (N λ) seconds on average. Saving
// every τ seconds at a stall of δ seconds per save, and recovering in R seconds (detection,
// relaunch, reload), a job loses the share
//
//     waste(τ) = δ / τ + (τ / 2 + R) / M
//
// of its time: the stalls, half an interval of redone steps per failure, the recovery. It is
// least at Young's interval τ* = sqrt(2 δ M), and the goodput is 1 - waste(τ*). (Daly's
// refinement, sqrt(2 δ (M + R)) - δ, models the expected run time more exactly; it moves τ*
// by under 1% while δ and R are small against M, which is when checkpointing pays at all.)

#include <cstdint>
#include <string>

namespace tessera::plan {

struct FailureModel {
  double node_failures_per_day = 0.05;  // a common planning figure: 5% of nodes a day
  double save_stall_s = 0;              // δ: what a save costs the training loop
  double restart_s = 0;                 // R: from the failure to training again
  // How long a save takes to reach storage: a save cannot start before the last one is on
  // disk, so τ is at least this (it binds when saves run in the background, δ ~ 0).
  double write_s = 0;
};

struct CheckpointEconomics {
  double mtbf_s = 0;              // M: of the whole job
  double interval_s = 0;          // τ*, Young
  double lost_per_failure_s = 0;  // τ* / 2 + R
  double waste = 0;               // at τ*
  double goodput = 0;             // 1 - waste
  double failures = 0;            // expected over `run_s` of wall time (0 when none given)
};

// Throws naming the field when a figure is negative or not finite, or the node count < 1.
CheckpointEconomics checkpoint_economics(int nodes, const FailureModel& model, double run_s = 0);

// What a plan assumes about checkpoints when nothing better is known, and what a calibration
// replaces. A checkpoint is the fp32 master and both AdamW moments, 12 bytes a parameter, every
// node writing its share (sharded saves).
struct CheckpointInputs {
  double node_failures_per_day = 0.05;
  double storage_gbps = 2;   // per node, written and read back (an assumption: say yours)
  double save_stall_s = -1;  // -1: the write itself, as a synchronous save stalls
  double restart_s = -1;     // -1: relaunch_s plus reading the checkpoint back
  double relaunch_s = 120;   // detection, rescheduling, process start (an assumption)
  std::string source = "assumed";

  // Throws naming the figure and its range when one is outside what clusters span.
  void validate() const;
};

struct CheckpointPlan {
  int nodes = 1;
  double checkpoint_bytes = 0;
  FailureModel model;
  CheckpointEconomics economics;
  std::string source;
};

CheckpointPlan plan_checkpoints(int64_t parameters, int nodes, double run_s,
                                const CheckpointInputs& inputs);

}  // namespace tessera::plan
