#pragma once
// The exit statuses of `tessera train`, in one place: `tessera launch` reads them to decide
// whether a failed job is restarted (docs/resilience.md).

namespace tessera::cli {

inline constexpr int kTrainFailedExit = 1;  // an error (a file, a bad value) on some rank
inline constexpr int kUnrunnableExit = 2;   // a device or layout this machine cannot run
inline constexpr int kPreemptedExit = 75;   // SIGTERM or SIGUSR1: checkpoint saved (EX_TEMPFAIL)
inline constexpr int kCommFailedExit = 124;  // a collective timed out or failed (CommError)
inline constexpr int kInterruptedExit = 130;  // SIGINT (Ctrl-C): checkpoint saved

}  // namespace tessera::cli
