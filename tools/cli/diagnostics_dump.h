#pragma once
// SIGUSR2 asks a rank of `tessera train` for its diagnostics: the handler writes one line to
// stderr, from a buffer the training loop keeps current, so that it works while the rank is
// stuck anywhere (inside a collective, a kernel, a write). `tessera launch` sends it before it
// kills a stuck job. The same signal makes the rank's flight watch dump its flight recorder
// into <run_dir>/flight (parallel/comm/flight_watch.h).

#include <string>

namespace tessera::cli {

// Installs the SIGUSR2 handler for its lifetime.
class DiagnosticsDump {
 public:
  DiagnosticsDump();
  ~DiagnosticsDump();
  DiagnosticsDump(const DiagnosticsDump&) = delete;
  DiagnosticsDump& operator=(const DiagnosticsDump&) = delete;

  // What the next dump says ("rank 1 (pid 42 on node3): phase step, step 17"); one thread
  // calls it (the training loop's).
  static void set_status(const std::string& status);
};

}  // namespace tessera::cli
