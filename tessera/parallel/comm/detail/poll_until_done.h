#pragma once
// The wait loop the communicators use for a blocking wait: poll a non-blocking completion
// test until it passes. Past the timeout, or when the test throws (a transport error, a peer's
// failure), the group is marked broken and CommError is thrown (comm_health.h): a collective
// that never completes would otherwise hang every rank, and the caller, not the library,
// decides whether the process ends. Two ways to wait (CommWait): spin polls back to back,
// reading the clock every 1024 polls; yield polls 64 times, then sleeps between polls with
// exponential backoff (1 us up to 100 us), so that an oversubscribed rank hands its core to the
// peer it waits on.

#include <time.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>

#include "tessera/parallel/comm/comm_health.h"

namespace tessera::parallel {

// done(): true once complete (it may throw). describe(): the collective, rank, group and step
// for the error. abandon(): called once before the throw; it keeps whatever the posted
// operation may still write or read alive to the end of the process (MPI and NCCL cannot
// cancel a collective) and tears down what can be torn down (ncclCommAbort). yield: whether
// to sleep between polls (CommWait::yield; automatic counts as yield, the safe choice for a
// communicator that was never resolved).
template <class Done, class Describe, class Abandon>
void poll_until_done(Done&& done, double timeout_seconds,
                     std::chrono::steady_clock::time_point start, Describe&& describe,
                     CommHealth& health, Abandon&& abandon, bool yield = true) {
  constexpr int kSpins = 64;
  constexpr int kSpinClockEvery = 1024;
  constexpr long kMaxSleepNs = 100000;
  int spins = 0;
  long sleep_ns = 1000;
  for (;;) {
    bool finished = false;
    try {
      finished = done();
    } catch (const CommError&) {
      abandon();
      throw;  // already names the group's failure
    } catch (const std::exception& e) {
      abandon();
      health.fail(str_cat(e.what(), ": ", describe()));
    }
    if (finished) return;
    ++spins;
    if (yield ? spins < kSpins : spins % kSpinClockEvery != 0) continue;
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout_seconds) {
      abandon();
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.1f", waited);
      health.fail(str_cat("collective timed out after ", seconds, " s (timeout ",
                          timeout_seconds, " s): ", describe()));
    }
    if (!yield) continue;
    struct timespec ts {
      0, sleep_ns
    };
    nanosleep(&ts, nullptr);
    sleep_ns = std::min(sleep_ns * 2, kMaxSleepNs);
  }
}

}  // namespace tessera::parallel
