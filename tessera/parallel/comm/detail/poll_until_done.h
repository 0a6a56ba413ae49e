#pragma once
// The wait loop the communicators use for a blocking wait: poll a non-blocking completion
// test; past the timeout, print the one line that names the collective and abort the whole
// job (a collective that never completes would otherwise hang every rank). Two ways to wait
// (CommWait): spin polls back to back, reading the clock every 1024 polls; yield polls 64
// times, then sleeps between polls with exponential backoff (1 us up to 100 us), so that an
// oversubscribed rank hands its core to the peer it waits on.

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

namespace tessera::parallel {

// done(): true once complete (it may throw). describe(): the collective, rank, group and step
// for the timeout line. abort_job(): never returns (MPI_Abort after any transport cleanup).
// yield: whether to sleep between polls (CommWait::yield; automatic counts as yield, the
// safe choice for a communicator that was never resolved).
template <class Done, class Describe, class AbortJob>
void poll_until_done(Done&& done, double timeout_seconds,
                     std::chrono::steady_clock::time_point start, Describe&& describe,
                     AbortJob&& abort_job, bool yield = true) {
  constexpr int kSpins = 64;
  constexpr int kSpinClockEvery = 1024;
  constexpr long kMaxSleepNs = 100000;
  int spins = 0;
  long sleep_ns = 1000;
  while (!done()) {
    ++spins;
    if (yield ? spins < kSpins : spins % kSpinClockEvery != 0) continue;
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout_seconds) {
      const std::string what = describe();
      std::fprintf(stderr, "tessera: collective timed out after %.0f s: %s; aborting the job\n",
                   waited, what.c_str());
      std::fflush(stderr);
      abort_job();
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
