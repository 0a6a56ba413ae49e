#pragma once
// The dry-run simulator: runs every rank's action list of a schedule together, with a cost per
// action and no tensors, the way the executor would run them (sends posted asynchronously,
// receives blocking, messages matched in order per tag). It reports:
//  - deadlock: no rank can progress while some have actions left (naming what each waits for);
//  - causality: a backward before its forward, a forward before its input arrived (or before
//    the previous chunk on the same rank ran), a send of something not computed yet, a
//    receive whose next message on the channel is another micro-batch;
//  - balance: every rank runs the forward and the backward of every (micro-batch, chunk)
//    exactly once, and every message sent is received;
// and, for a sound schedule, the timeline: makespan, each rank's busy and idle time, the
// measured bubble beside the ideal (p - 1) / (v * m), and the peak number of micro-batch
// chunks whose activations a rank holds (forward run, backward not yet).

#include <string>
#include <vector>

#include "tessera/parallel/pipeline/schedule.h"

namespace tessera::parallel {

struct SimulationOptions {
  // One micro-batch through all of a rank's layers; each of its v chunks takes 1/v of it, so
  // schedules with different v compare on the same model.
  double forward_cost = 1.0;
  double backward_cost = 2.0;  // about twice the forward's FLOPs
  double transfer_cost = 0.0;  // from a send to the earliest completion of its receive
  double all_reduce_cost = 0.0;
  // Rendezvous sends that block until the receiver takes the message (MPI_Send of a large
  // buffer). The executor never does this; the option shows which schedules would deadlock.
  bool blocking_sends = false;
};

// One compute action on the simulated timeline.
struct TimelineBox {
  int rank = 0;
  ActionKind kind = ActionKind::forward;
  int micro = 0, chunk = 0;
  double start = 0, end = 0;
};

struct SimulationResult {
  std::vector<std::string> errors;  // empty for a sound schedule
  bool ok() const { return errors.empty(); }

  double makespan = 0;
  std::vector<double> busy, idle;   // per rank; idle = makespan - busy
  std::vector<int> peak_in_flight;  // per rank, in micro-batch chunks
  double bubble = 0;                // measured: total idle over total busy
  double ideal_bubble = 0;          // (p - 1) / (v * m)
  std::vector<TimelineBox> boxes;   // every forward and backward, in the order they ran
  // When each action of each rank's list completed (a send: when it was posted).
  std::vector<std::vector<double>> end_times;
};

SimulationResult simulate(const Schedule& schedule, const SimulationOptions& options = {});

// Throws tessera::Error naming the schedule and its first problems unless it simulates
// cleanly; returns the simulation otherwise.
SimulationResult check_schedule(const Schedule& schedule, const SimulationOptions& options = {});

// A few lines: the schedule, makespan, measured and ideal bubble, and per-rank busy, idle and
// peak in-flight micro-batch chunks.
std::string format_summary(const Schedule& schedule, const SimulationResult& result);

}  // namespace tessera::parallel
