// The kernel simulator's own speed (tessera/cuda/sim): how fast it switches between simulated
// threads, and how fast a block's threads cross __syncthreads(). These two rates bound how
// large a kernel test can be (a launch of N threads that crosses B barriers costs about
// N * B crossings), which is why simulated test sizes stay small.
//
//   BM_FiberSwitch     one switch between two fibers (the primitive under everything)
//   BM_BarrierCrossing 256 threads of one block crossing __syncthreads() 64 times
//
// Counters: switches/s and crossings/s. There is no external reference: the figure to compare
// is the GPU's, where a barrier crossing costs a few cycles.

#include <benchmark/benchmark.h>

#include <cstdint>

#include "tessera/cuda/device.h"
#include "tessera/cuda/sim/fiber.h"

namespace tessera::cuda {
namespace {

struct PingPong {
  sim::detail::Fiber host;
  sim::detail::Fiber fiber;
  int64_t count = 0;
};

void ping(void* arg) {
  auto* p = static_cast<PingPong*>(arg);
  for (;;) {
    ++p->count;
    sim::detail::Fiber::switch_to(p->fiber, p->host);
  }
}

void BM_FiberSwitch(benchmark::State& state) {
  sim::detail::FiberStack stack(64 * 1024);
  PingPong p;
  p.fiber.start(stack, &ping, &p);
  for (auto _ : state) sim::detail::Fiber::switch_to(p.host, p.fiber);
  if (p.count != int64_t(state.iterations())) state.SkipWithError("lost a switch");
  // Two switches per iteration: into the fiber and back.
  state.counters["switches/s"] =
      benchmark::Counter(2.0 * double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FiberSwitch);

constexpr int kThreads = 256;
constexpr int kRounds = 64;

__global__ void many_barriers(int rounds) {
  for (int r = 0; r < rounds; ++r) __syncthreads();
}

void BM_BarrierCrossing(benchmark::State& state) {
  for (auto _ : state)
    launch(many_barriers, LaunchConfig{dim3(1), dim3(kThreads), 0, nullptr, "many_barriers"},
           kRounds);
  state.counters["crossings/s"] = benchmark::Counter(
      double(state.iterations()) * kThreads * kRounds, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_BarrierCrossing)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tessera::cuda
