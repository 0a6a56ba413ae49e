// Fibers (tessera/cuda/sim/fiber.h): switching keeps each context's registers and stack, and a
// stack overflow faults in the guard page. The switch rate is measured by
// bench/bench_simulator.cpp, not here.

#include "tessera/cuda/sim/fiber.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "tessera/cuda/sim/launch.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda::sim::detail {
namespace {

struct PingPong {
  Fiber host;
  Fiber fiber;
  int64_t count = 0;
  double sum = 0.0;  // kept in the fiber's frame between switches
};

void ping(void* arg) {
  auto* p = static_cast<PingPong*>(arg);
  double local = 0.0;
  for (int64_t i = 1;; ++i) {
    local += double(i);
    p->sum = local;
    ++p->count;
    Fiber::switch_to(p->fiber, p->host);
  }
}

TEST(SimFiber, SwitchingKeepsTheFibersOwnStackAndLocals) {
  FiberStack stack(64 * 1024);
  PingPong p;
  p.fiber.start(stack, &ping, &p);
  for (int i = 0; i < 1000; ++i) Fiber::switch_to(p.host, p.fiber);
  EXPECT_EQ(p.count, 1000);
  EXPECT_EQ(p.sum, 1000.0 * 1001.0 / 2.0);  // integers below 2^53: exact in double
}

struct Finisher {
  Fiber host;
  Fiber fiber;
  int runs = 0;
};

void run_once(void* arg) {
  auto* f = static_cast<Finisher*>(arg);
  ++f->runs;
  Fiber::exit_to(f->fiber, f->host);
}

TEST(SimFiber, AnExitedFiberCanBeStartedAgainOnTheSameStack) {
  FiberStack stack(32 * 1024);
  Finisher f;
  for (int i = 0; i < 3; ++i) {
    f.fiber.start(stack, &run_once, &f);
    Fiber::switch_to(f.host, f.fiber);
  }
  EXPECT_EQ(f.runs, 3);
}

// ---- stack overflow: the guard page turns it into a fault at a known address ----

const char* g_guard_begin = nullptr;
const char* g_guard_end = nullptr;

void on_segv(int, siginfo_t* info, void*) {
  const auto* addr = static_cast<const char*>(info->si_addr);
  const bool in_guard = addr >= g_guard_begin && addr < g_guard_end;
  const char* text = in_guard ? "fault in the fiber stack guard page\n" : "fault elsewhere\n";
  (void)!write(2, text, __builtin_strlen(text));
  _exit(in_guard ? 3 : 4);
}

int recurse(int depth, int limit) {
  volatile char frame[512];
  frame[0] = char(depth);
  if (depth == limit) return frame[0];
  return recurse(depth + 1, limit) + frame[0];
}

void overflow(void*) {
  volatile int limit = 1 << 30;
  (void)recurse(0, limit);
}

void overflow_a_fiber_stack() {
  static std::vector<char> alt_stack(64 * 1024);
  stack_t ss{};
  ss.ss_sp = alt_stack.data();
  ss.ss_size = alt_stack.size();
  sigaltstack(&ss, nullptr);
  struct sigaction action {};
  action.sa_sigaction = &on_segv;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigaction(SIGSEGV, &action, nullptr);

  FiberStack stack(16 * 1024);
  g_guard_begin = stack.base() - sysconf(_SC_PAGESIZE);
  g_guard_end = stack.base();
  Fiber host, fiber;
  fiber.start(stack, &overflow, nullptr);
  Fiber::switch_to(host, fiber);
}

TEST(SimFiberDeathTest, StackOverflowFaultsInTheGuardPage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(overflow_a_fiber_stack(), ::testing::ExitedWithCode(3),
              "fault in the fiber stack guard page");
}

}  // namespace
}  // namespace tessera::cuda::sim::detail
