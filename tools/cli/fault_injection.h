#pragma once
// Planted failures for the resilience tests (tests/tools/launch_test.sh), read from the
// environment by `tessera train` when it runs under `tessera launch`. TESSERA_FAULT holds one
// fault:
//   kill:R@S    rank R sends itself SIGKILL after finishing step S (the first attempt only)
//   stop:R@S    rank R stops itself (SIGSTOP): a process that hangs without running
//   hang:R@S    rank R sleeps forever, still answering signals (a SIGUSR2 dump shows it)
//   storm:KxN   in each of the first N attempts, rank (attempt mod world size) kills itself K
//               steps after the step it resumed from
//   slow:R      rank R's pre-flight compute takes 200 ms longer, every attempt
//   delay:P:R:MS[@S]  from step S (default 1) on, every step of rank R spends MS more
//               milliseconds in phase P: data (a sleep in the loader's turn) or compute (a
//               busy spin inside the engine's step): the straggler tests (train/stragglers.h).
//               Read by `tessera train` with or without `tessera launch`
// R is a world rank or "all". The attempt is TESSERA_LAUNCH_ATTEMPT (0 for the first), which
// the supervisor sets. A value that does not parse is refused at startup, naming it.

#include <cstdint>
#include <string>

namespace tessera::cli {

class FaultInjection {
 public:
  // From TESSERA_FAULT and TESSERA_LAUNCH_ATTEMPT; inactive when TESSERA_FAULT is unset.
  FaultInjection(int rank, int world_size);
  bool active() const { return kind_ != Kind::none; }
  // Called after each beat: plays the fault when its step comes.
  void after_beat(const std::string& phase, int64_t step, int64_t start_step) const;
  // The delay slow:R plants in this rank's pre-flight probe (0 otherwise).
  double preflight_delay_ms() const { return kind_ == Kind::slow && mine_ ? 200 : 0; }
  // delay:P:R:MS@S on this rank: the phase, the milliseconds and the first step.
  struct Delay {
    std::string phase;
    double ms = 0;
    int64_t from_step = 1;
  };
  const Delay* planted_delay() const { return kind_ == Kind::delay && mine_ ? &delay_ : nullptr; }

 private:
  enum class Kind { none, kill, stop, hang, storm, slow, delay };
  Kind kind_ = Kind::none;
  int64_t step_ = 0;   // kill/stop/hang: the step; storm: K
  bool mine_ = false;  // whether this rank plays it in this attempt
  Delay delay_;
};

}  // namespace tessera::cli
