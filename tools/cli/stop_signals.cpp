#include "cli/stop_signals.h"

#include <time.h>
#include <unistd.h>

namespace tessera::cli {

namespace {

constexpr int kStopSignals[3] = {SIGINT, SIGTERM, SIGUSR1};

// Lock-free atomics only: the handler runs between any two instructions of the program.
std::atomic<bool> g_requested{false};
std::atomic<int> g_first_signal{0};
std::atomic<int64_t> g_first_ns{0};
static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

int64_t monotonic_ns() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);  // async-signal-safe (POSIX)
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

void on_stop_signal(int signal) {
  const int64_t now = monotonic_ns();
  int none = 0;
  if (g_first_signal.compare_exchange_strong(none, signal)) {
    g_first_ns.store(now);
    g_requested.store(true);
    return;
  }
  if (double(now - g_first_ns.load()) >= kRepeatSeconds * 1e9) _exit(128 + signal);
}

}  // namespace

StopSignals::StopSignals() {
  g_requested.store(false);
  g_first_signal.store(0);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int i = 0; i < 3; ++i) sigaction(kStopSignals[i], &action, &previous_[i]);
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 3; ++i) sigaction(kStopSignals[i], &previous_[i], nullptr);
}

const std::atomic<bool>* StopSignals::requested() const {
  return &g_requested;
}

int StopSignals::first_signal() {
  return g_first_signal.load();
}

int stopped_exit_status(int signal) {
  return signal == SIGTERM || signal == SIGUSR1 ? kPreemptedExit : kInterruptedExit;
}

}  // namespace tessera::cli
