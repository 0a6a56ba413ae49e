// The missing-barrier detector: a planted missing __syncthreads() in a tree reduction and in a
// tiled matmul is reported as a shared-memory race naming the array, the index and both
// threads, on every schedule. Correct kernels (barriers, full-warp __syncwarp, atomics only)
// are not reported. Without the detector, the adversarial schedule still makes the bug visible
// as a wrong result.

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "tessera/cuda/device.h"
#include "tessera/cuda/sim/device_memory.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::config;
using testing::expect_error;

template <bool kBarrier>
__global__ void tree_reduce(const float* x, float* out) {
  TESSERA_SHARED(float, partial, 256);
  const unsigned t = threadIdx.x;
  partial[t] = x[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    if (kBarrier) __syncthreads();  // planted bug when kBarrier is false
  }
  if (t == 0) out[blockIdx.x] = partial[0];
}

std::vector<float> ones(size_t n) { return std::vector<float>(n, 1.0f); }

class SimRace : public ::testing::TestWithParam<sim::Schedule> {};

TEST_P(SimRace, AMissingBarrierInAReductionIsReported) {
  sim::ScopedOptions scoped(testing::options_with(GetParam()));
  sim::DeviceBuffer<float> x(ones(512), "x");
  sim::DeviceBuffer<float> out(2, "out");
  expect_error(
      [&] { launch(tree_reduce<false>, config(dim3(2), dim3(256), "reduce"), x.data(), out.data()); },
      {"kernel 'reduce' block (0,0,0)", "shared-memory race", "'partial'[",
       "in the same barrier interval", "no __syncthreads() in between"});
  launch(tree_reduce<true>, config(dim3(2), dim3(256), "reduce"), x.data(), out.data());
  EXPECT_EQ(out[0], 256.0f);  // sums of ones: exact
  EXPECT_EQ(out[1], 256.0f);
}

TEST(SimRace, WithoutTheDetectorTheScheduleStillExposesTheMissingBarrier) {
  sim::SimOptions o;
  o.detect_races = false;
  sim::ScopedOptions scoped(o);
  sim::DeviceBuffer<float> x(ones(256), "x");
  sim::DeviceBuffer<float> out(1, "out");
  launch(tree_reduce<false>, config(dim3(1), dim3(256), "reduce"), x.data(), out.data());
  // Thread 0 runs every level before the others add their halves, so it sums stale values.
  EXPECT_NE(out[0], 256.0f);
}

TEST(SimRace, TheReportNamesBothThreads) {
  sim::DeviceBuffer<float> x(ones(256), "x");
  sim::DeviceBuffer<float> out(1, "out");
  // Forward schedule: thread 0 reads partial[1] at the last level; thread 1 then writes it.
  expect_error(
      [&] { launch(tree_reduce<false>, config(dim3(1), dim3(256), "reduce"), x.data(), out.data()); },
      {"thread (1,0,0): shared-memory race: writes 'partial'[1]", "which thread (0,0,0) read"});
}

// The tiled matmul of the self-test kernels with the barrier after the compute loop removed:
// fast threads overwrite a tile that slower ones are still reading.
constexpr int kTile = 16;
__global__ void tiled_matmul_missing_barrier(const float* a, const float* b, float* c, int n) {
  TESSERA_SHARED(float, a_tile, kTile * kTile);
  TESSERA_SHARED(float, b_tile, kTile * kTile);
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  const int row = int(blockIdx.y) * kTile + ty, col = int(blockIdx.x) * kTile + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < n; k0 += kTile) {
    a_tile[ty * kTile + tx] = a[row * n + k0 + tx];
    b_tile[ty * kTile + tx] = b[(k0 + ty) * n + col];
    __syncthreads();
    for (int kk = 0; kk < kTile; ++kk) acc += a_tile[ty * kTile + kk] * b_tile[kk * kTile + tx];
  }
  c[row * n + col] = acc;
}

TEST_P(SimRace, AMissingBarrierInATiledMatmulIsReported) {
  sim::ScopedOptions scoped(testing::options_with(GetParam()));
  constexpr int n = 32;
  sim::DeviceBuffer<float> a(ones(n * n), "a"), b(ones(n * n), "b"), c(n * n, "c");
  expect_error(
      [&] {
        launch(tiled_matmul_missing_barrier, config(dim3(2, 2), dim3(kTile, kTile), "matmul"),
               a.data(), b.data(), c.data(), n);
      },
      {"kernel 'matmul' block (0,0,0)", "shared-memory race", "_tile'["});
}

INSTANTIATE_TEST_SUITE_P(Schedules, SimRace,
                         ::testing::Values(sim::Schedule::kForward, sim::Schedule::kReverse));

// Lanes exchange values through shared memory; with a full-warp __syncwarp() in between that
// is correct, without it a race; across warps __syncwarp() is not enough.
template <bool kSyncWarp>
__global__ void warp_exchange(int* out, int stride) {
  TESSERA_SHARED(int, slots, 64);
  const int t = int(threadIdx.x);
  slots[t] = t;
  if (kSyncWarp) __syncwarp();
  out[t] = slots[(t + stride) % int(blockDim.x)];
}

TEST(SimRace, FullWarpSyncwarpOrdersAccessesWithinAWarpOnly) {
  sim::DeviceBuffer<int> out(64, "out");
  launch(warp_exchange<true>, config(dim3(1), dim3(32), "exchange"), out.data(), 1);
  for (int t = 0; t < 32; ++t) EXPECT_EQ(out[size_t(t)], (t + 1) % 32);
  expect_error(
      [&] { launch(warp_exchange<false>, config(dim3(1), dim3(32), "exchange"), out.data(), 1); },
      {"shared-memory race", "'slots'["});
  expect_error(
      [&] { launch(warp_exchange<true>, config(dim3(1), dim3(64), "exchange"), out.data(), 32); },
      {"shared-memory race", "'slots'["});
}

// Atomics among themselves are fine; a plain read of the same word in the same interval is not.
template <bool kPlainRead>
__global__ void shared_counter(int* out) {
  TESSERA_SHARED(int, counter, 1);
  if (threadIdx.x == 0) counter[0] = 0;
  __syncthreads();
  atomicAdd(&counter[0], 1);
  if (kPlainRead && threadIdx.x == 40) out[1] = counter[0];
  __syncthreads();
  if (threadIdx.x == 0) out[0] = counter[0];
}

TEST(SimRace, AtomicsConflictOnlyWithPlainAccesses) {
  sim::DeviceBuffer<int> out(2, "out");
  launch(shared_counter<false>, config(dim3(1), dim3(64), "counter"), out.data());
  EXPECT_EQ(out[0], 64);
  expect_error([&] { launch(shared_counter<true>, config(dim3(1), dim3(64), "counter"), out.data()); },
               {"thread (40,0,0)", "reads 'counter'[0]", "updated atomically"});
}

// Broadcast: one writer before the barrier, every thread reads after it; a thread also reads
// back what it wrote itself without a barrier. Neither is a race.
__global__ void broadcast(int* out) {
  TESSERA_SHARED(int, value, 1);
  TESSERA_SHARED(int, own, 128);
  if (threadIdx.x == 0) value[0] = 42;
  own[threadIdx.x] = int(threadIdx.x);
  const int mine = own[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = value[0] + mine;
}

TEST(SimRace, CorrectSharingPatternsAreNotReported) {
  sim::DeviceBuffer<int> out(128, "out");
  launch(broadcast, config(dim3(1), dim3(128), "broadcast"), out.data());
  for (int t = 0; t < 128; ++t) EXPECT_EQ(out[size_t(t)], 42 + t);
}

}  // namespace
}  // namespace tessera::cuda
