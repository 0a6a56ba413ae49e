// Atomics in the simulator are real atomics: blocks run on several host threads at once, so
// totals over a grid are exact only if every update is. A spin lock built from atomicCAS and
// atomicExch works inside and across blocks (atomicCAS/atomicExch let other threads run).

#include <gtest/gtest.h>

#include <cstdint>

#include "tessera/cuda/device.h"
#include "tessera/cuda/sim/device_memory.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::config;

constexpr int kBlocks = 48, kThreads = 128;

__global__ void accumulate(int* i, unsigned* u, unsigned long long* ull, float* f, double* d,
                           int* max_i, int* min_i, unsigned* bits) {
  const int t = int(blockIdx.x * blockDim.x + threadIdx.x);
  atomicAdd(i, 1);
  atomicAdd(u, 2u);
  atomicAdd(ull, 1ull << 33);
  atomicAdd(f, 0.5f);
  atomicAdd(d, 0.25);
  atomicMax(max_i, t % 1000 - 500);
  atomicMin(min_i, 7 - t);
  atomicOr(bits, 1u << (t % 32));
}

TEST(SimAtomics, TotalsOverAParallelGridAreExact) {
  sim::ScopedOptions scoped(testing::options_with(sim::Schedule::kForward, 2));
  sim::DeviceBuffer<int> i(std::vector<int>{0}, "i");
  sim::DeviceBuffer<unsigned> u(std::vector<unsigned>{0}, "u");
  sim::DeviceBuffer<unsigned long long> ull(std::vector<unsigned long long>{0}, "ull");
  sim::DeviceBuffer<float> f(std::vector<float>{0}, "f");
  sim::DeviceBuffer<double> d(std::vector<double>{0}, "d");
  sim::DeviceBuffer<int> max_i(std::vector<int>{-1000000}, "max_i");
  sim::DeviceBuffer<int> min_i(std::vector<int>{1000000}, "min_i");
  sim::DeviceBuffer<unsigned> bits(std::vector<unsigned>{0}, "bits");
  launch(accumulate, config(dim3(kBlocks), dim3(kThreads), "accumulate"), i.data(), u.data(),
         ull.data(), f.data(), d.data(), max_i.data(), min_i.data(), bits.data());
  constexpr int n = kBlocks * kThreads;
  EXPECT_EQ(i[0], n);
  EXPECT_EQ(u[0], 2u * n);
  EXPECT_EQ(ull[0], (unsigned long long)n << 33);
  EXPECT_EQ(f[0], 0.5f * n);  // multiples of 0.5 below 2^23: every partial sum is exact in f32
  EXPECT_EQ(d[0], 0.25 * n);  // likewise in f64
  EXPECT_EQ(max_i[0], 499);
  EXPECT_EQ(min_i[0], 7 - (n - 1));
  EXPECT_EQ(bits[0], 0xffffffffu);
}

__global__ void wrapping_counters(unsigned* inc, unsigned* dec, unsigned* exchanged) {
  atomicInc(inc, 7u);  // counts 0..7 and wraps
  atomicDec(dec, 9u);
  atomicExch(exchanged, threadIdx.x + 1);
}

TEST(SimAtomics, IncAndDecWrapAsCudaDefines) {
  sim::DeviceBuffer<unsigned> inc(std::vector<unsigned>{0}, "inc");
  sim::DeviceBuffer<unsigned> dec(std::vector<unsigned>{3}, "dec");
  sim::DeviceBuffer<unsigned> exchanged(std::vector<unsigned>{0}, "exchanged");
  launch(wrapping_counters, config(dim3(1), dim3(100), "counters"), inc.data(), dec.data(),
         exchanged.data());
  EXPECT_EQ(inc[0], 100u % 8u);
  // From 3: 3 steps down to 0, then 9, 8, ..., wrapping every 10 steps: 3 - 100 mod 10.
  EXPECT_EQ(dec[0], 3u);
  EXPECT_GE(exchanged[0], 1u);
  EXPECT_LE(exchanged[0], 100u);
}

// Every thread adds to a plain counter inside a critical section guarded by a spin lock.
__global__ void locked_increments(int* lock, int* counter, int times) {
  for (int i = 0; i < times; ++i) {
    while (atomicCAS(lock, 0, 1) != 0) {
    }
    *counter = *counter + 1;
    __threadfence();
    atomicExch(lock, 0);
  }
}

TEST(SimAtomics, ASpinLockMakesProgressInsideAndAcrossBlocks) {
  sim::ScopedOptions scoped(testing::options_with(sim::Schedule::kForward, 2));
  sim::DeviceBuffer<int> lock(std::vector<int>{0}, "lock");
  sim::DeviceBuffer<int> counter(std::vector<int>{0}, "counter");
  launch(locked_increments, config(dim3(4), dim3(32), "locked"), lock.data(), counter.data(), 5);
  EXPECT_EQ(counter[0], 4 * 32 * 5);
  EXPECT_EQ(lock[0], 0);
}

}  // namespace
}  // namespace tessera::cuda
