// tessera train's stop signals (cli/stop_signals.h), each case in a forked child so that a
// signal's exit ends only the child: the first stop signal asks for a stop and records which;
// a repeat within kRepeatSeconds is the same request; one after it exits at once with
// 128 + its number; the previous handlers come back afterwards.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

#include "cli/stop_signals.h"

namespace tessera::cli {
namespace {

// Runs body in a child and returns its exit status (-signal if a signal killed it).
template <class Body>
int in_child(Body body) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

void sleep_seconds(double s) {
  std::this_thread::sleep_for(std::chrono::duration<double>(s));
}

TEST(StopSignals, TheFirstSignalAsksForAStop) {
  for (int sig : {SIGINT, SIGTERM, SIGUSR1}) {
    EXPECT_EQ(in_child([sig] {
                StopSignals stop;
                if (stop.requested()->load() || StopSignals::first_signal() != 0) return 1;
                raise(sig);
                if (!stop.requested()->load()) return 2;
                if (StopSignals::first_signal() != sig) return 3;
                // The same request delivered twice (a terminal and mpiexec): no exit.
                raise(SIGINT);
                return StopSignals::first_signal() == sig ? 0 : 4;
              }),
              0)
        << "signal " << sig;
  }
  EXPECT_EQ(stopped_exit_status(SIGINT), 130);
  EXPECT_EQ(stopped_exit_status(SIGTERM), kPreemptedExit);
  EXPECT_EQ(stopped_exit_status(SIGUSR1), kPreemptedExit);
}

TEST(StopSignals, ASecondSignalLaterExitsAtOnce) {
  EXPECT_EQ(in_child([] {
              StopSignals stop;
              raise(SIGTERM);
              sleep_seconds(kRepeatSeconds + 0.2);
              raise(SIGUSR1);
              return 0;  // not reached: the handler exits
            }),
            128 + SIGUSR1);
}

TEST(StopSignals, PreviousHandlersAreRestored) {
  EXPECT_EQ(in_child([] {
              { StopSignals stop; }
              raise(SIGTERM);  // the default action again: the child dies of it
              return 0;
            }),
            -SIGTERM);
}

}  // namespace
}  // namespace tessera::cli
