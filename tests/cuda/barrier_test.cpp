// __syncthreads() in the simulator: a barrier releases only when every thread of the block has
// arrived, values written before it are visible after it, the counting forms reduce their
// predicates, and results do not depend on the schedule or on blocks running in parallel.

#include <gtest/gtest.h>

#include <vector>

#include "tessera/cuda/device.h"
#include "tessera/cuda/sim/device_memory.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::config;

// Each round every thread publishes its value and takes its right neighbour's: after r rounds
// thread t holds what thread (t + r) % n started with.
__global__ void rotate_through_shared(int* out, int rounds) {
  TESSERA_SHARED(int, slots, 1024);
  const int n = int(blockDim.x * blockDim.y);
  const int t = int(threadIdx.x + blockDim.x * threadIdx.y);
  int value = t + 1000 * int(blockIdx.x);
  for (int r = 0; r < rounds; ++r) {
    slots[t] = value;
    __syncthreads();
    value = slots[(t + 1) % n];
    __syncthreads();
  }
  out[int(blockIdx.x) * n + t] = value;
}

class SimBarrier : public ::testing::TestWithParam<sim::Schedule> {};

TEST_P(SimBarrier, ValuesWrittenBeforeABarrierAreSeenAfterIt) {
  sim::ScopedOptions scoped(testing::options_with(GetParam(), 2));
  constexpr int kBlocks = 8, kRounds = 7;
  const dim3 block(24, 4);  // 96 threads, three warps, two-dimensional
  const int n = 96;
  sim::DeviceBuffer<int> out(size_t(kBlocks * n), "out");
  launch(rotate_through_shared, config(dim3(kBlocks), block, "rotate"), out.data(), kRounds);
  for (int b = 0; b < kBlocks; ++b)
    for (int t = 0; t < n; ++t) EXPECT_EQ(out[size_t(b * n + t)], (t + kRounds) % n + 1000 * b);
}

// Every thread bumps a shared counter, then reads it after the barrier: nobody may pass the
// barrier before the last increment.
__global__ void count_then_read(int* out) {
  TESSERA_SHARED(int, counter, 1);
  if (threadIdx.x == 0) counter[0] = 0;
  __syncthreads();
  atomicAdd(&counter[0], 1);
  __syncthreads();
  out[threadIdx.x] = counter[0];
}

TEST_P(SimBarrier, ReleasesOnlyWhenEveryThreadHasArrived) {
  sim::ScopedOptions scoped(testing::options_with(GetParam()));
  sim::DeviceBuffer<int> out(200, "out");
  launch(count_then_read, config(dim3(1), dim3(200), "count"), out.data());
  for (int t = 0; t < 200; ++t) EXPECT_EQ(out[size_t(t)], 200);
}

__global__ void reduce_predicates(int* out) {
  const int t = int(threadIdx.x);
  out[4 * t + 0] = __syncthreads_count(t % 3 == 0);
  out[4 * t + 1] = __syncthreads_and(t >= 0);
  out[4 * t + 2] = __syncthreads_and(t != 17);
  out[4 * t + 3] = __syncthreads_or(t == 17);
}

TEST_P(SimBarrier, CountAndOrFormsReduceThePredicateOverTheBlock) {
  sim::ScopedOptions scoped(testing::options_with(GetParam()));
  constexpr int kThreads = 100;
  sim::DeviceBuffer<int> out(4 * kThreads, "out");
  launch(reduce_predicates, config(dim3(1), dim3(kThreads), "predicates"), out.data());
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(out[size_t(4 * t + 0)], 34);  // 0, 3, ..., 99
    EXPECT_EQ(out[size_t(4 * t + 1)], 1);
    EXPECT_EQ(out[size_t(4 * t + 2)], 0);
    EXPECT_EQ(out[size_t(4 * t + 3)], 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, SimBarrier,
                         ::testing::Values(sim::Schedule::kForward, sim::Schedule::kReverse));

}  // namespace
}  // namespace tessera::cuda
