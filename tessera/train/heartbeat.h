#pragma once
// Heartbeat: each rank's sign of progress, for a supervisor (`tessera launch`) to read.
//
// A rank rewrites <dir>/rank_<r>.json (temp file and rename: a reader sees the old beat or the
// new one, never half of one) when it finishes setup, after every step, and around every
// checkpoint save. A supervisor that sees a rank's beat grow older than its timeout takes the
// rank for stuck. A save may take far longer than a step, so the beat before one says how long
// it may take ("allow_s", the run's --save-timeout). The beats are not fsynced: they describe a
// live process, and a machine that crashed has no process left to describe.
//
//   {"rank": 1, "pid": 4242, "host": "node17", "phase": "step", "step": 120,
//    "start_step": 100, "allow_s": 0, "time": 1764806400.25}
//
// phase: "setup" (loaded and resumed: start_step is the step it resumed from), "step" (step
// finished), "save" (saving the checkpoint of step; allow_s), "saved", or "exit" (the last
// beat, with "status": the process's exit status).

#include <cstdint>
#include <functional>
#include <string>

namespace tessera::train {

class Heartbeat {
 public:
  // dir is created if missing; rank is this process's rank in the world.
  Heartbeat(std::string dir, int rank);

  void beat(const std::string& phase, int64_t step, int64_t start_step, double allow_seconds = 0);
  // The last beat, phase "exit": the status this rank's process ends with.
  void finish(int status);
  const std::string& path() const { return path_; }
  // The latest beat, one line ("rank 1 (pid 4242 on node17): phase step, step 120"), for a
  // diagnostics dump.
  const std::string& last() const { return last_; }
  const std::string& phase() const { return phase_; }
  int64_t step() const { return step_; }
  int64_t start_step() const { return start_step_; }
  // Called after every beat (the CLI keeps last() for its SIGUSR2 dump).
  void on_beat(std::function<void(const Heartbeat&)> f) { on_beat_ = std::move(f); }

 private:
  // status >= 0: the "exit" beat's.
  void write_beat(const std::string& phase, int64_t step, int64_t start_step,
                  double allow_seconds, int status);

  std::string dir_, path_, host_, last_, phase_;
  int64_t step_ = -1, start_step_ = -1;
  std::function<void(const Heartbeat&)> on_beat_;
  int rank_;
  int64_t pid_;
};

// The file of `rank`'s beats in `dir`.
std::string heartbeat_path(const std::string& dir, int rank);

}  // namespace tessera::train
