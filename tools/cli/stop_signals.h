#pragma once
// How `tessera train` stops on a signal. The first SIGINT, SIGTERM or SIGUSR1 asks the run to
// finish its current step, save a checkpoint and exit (every rank agrees on the step, so one
// rank's signal stops all of them). Another stop signal at least kRepeatSeconds later exits at
// once with 128 + its number: the checkpoint being written, if any, stays a temporary that
// readers ignore, so nothing on disk is left half-written. A repeat sooner than that is taken
// for the same request delivered twice (a terminal's Ctrl-C reaches the ranks directly and
// through mpiexec, which forwards it).
//
// Exit statuses: 130 after SIGINT (Ctrl-C); kPreemptedExit (75, EX_TEMPFAIL) after SIGTERM or
// SIGUSR1, how Slurm and Kubernetes preempt: a checkpoint was saved, rerun the same command
// to resume (docs/training.md).

#include <atomic>
#include <csignal>

#include "cli/exit_status.h"

namespace tessera::cli {

inline constexpr double kRepeatSeconds = 1.0;

// Installs the handlers for its lifetime and restores the previous ones after.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // Set by the first stop signal: what Trainer::fit polls.
  const std::atomic<bool>* requested() const;
  // The first stop signal's number, or 0.
  static int first_signal();

 private:
  struct sigaction previous_[3];
};

// The exit status of a run stopped by `signal` (the highest any rank received): 130 for
// SIGINT, kPreemptedExit for SIGTERM and SIGUSR1.
int stopped_exit_status(int signal);

}  // namespace tessera::cli
