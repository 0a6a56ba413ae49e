#pragma once
// The supervisor behind `tessera launch`: runs a training job (a launcher command such as
// `mpiexec -n 4 tessera train ...` or `srun ...`), watches every rank's heartbeat
// (tessera/train/heartbeat.h), and restarts the job from its newest good checkpoint when a rank
// dies or stops making progress, up to a budget of restarts.
//
//   start ──> watch ──(exit 0)──> done
//               │ (exit 75/130: preempted or interrupted) ──> exit with it, for the scheduler
//               │ (exit 2: cannot run here) ──> exit 2, no restart
//               │ (the program cannot be started) ──> exit 127, no restart
//               │ (other exit, or a rank silent past the heartbeat timeout)
//               v
//     stuck? SIGUSR2 to every rank, wait the dump window ──> SIGKILL the whole job
//               v
//     restarts < max? ──yes──> log the restart, start again (train resumes by itself)
//               └──no──> one-line summary, exit non-zero
//
// Timeouts, shortest first (docs/resilience.md): the collective timeout (train's
// --comm-timeout: a hung peer makes the others throw and the job exit 124) < the heartbeat
// timeout (the whole job stopped: nothing else notices) < the heartbeat timeout plus the dump
// window (the kill). A rank saving a checkpoint may stay silent for its beat's allow_s.

#include <iosfwd>
#include <string>
#include <vector>

namespace tessera::cli {

// The most ranks one supervisor watches: 2^20, past the largest jobs run (tens of thousands of
// GPUs). Each poll reads every rank's heartbeat file: --ranks 10^8 held 13.6 GiB ten minutes
// on, and did not stop on SIGTERM.
inline constexpr int kMaxLaunchRanks = 1 << 20;

struct LaunchOptions {
  std::vector<std::string> command;  // the job: argv of a launcher or of tessera train itself
  std::string run_dir;               // "": the command's --run-dir (or train's default)
  int ranks = 0;                     // 0: dp * tp * pp from the command's flags (1 for a script)
  int max_restarts = 3;
  double heartbeat_timeout = 900;  // seconds a rank may go without a beat
  double dump_window = 30;         // seconds between SIGUSR2 and SIGKILL
  double poll_seconds = 0.1;
};

// Runs the job to completion under the options; returns the exit status launch ends with.
// Progress and restarts go to *out, one line each; the restarts also to
// <run_dir>/restarts.jsonl. Throws tessera::Error on options that cannot work.
int supervise(LaunchOptions options, std::ostream& out);

// The value of `--flag V` or `--flag=V` in command, or "" (exposed for tests).
std::string command_flag(const std::vector<std::string>& command, const std::string& flag);

}  // namespace tessera::cli
