// Launching in the simulator: thread and block indexing over 1-3 D grids, launch validation,
// kernels as lambdas, misuse outside a kernel, and deterministic error reports with blocks
// running in parallel.

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tessera/cuda/device.h"
#include "tessera/cuda/sim/device_memory.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::config;
using testing::expect_error;

// Every thread writes its (threadIdx, blockIdx) into its own slot of six values.
__global__ void record_indices(unsigned* out) {
  const uint64_t block = blockIdx.x + uint64_t(gridDim.x) * (blockIdx.y + gridDim.y * blockIdx.z);
  const uint64_t thread = threadIdx.x + uint64_t(blockDim.x) * (threadIdx.y + blockDim.y * threadIdx.z);
  const uint64_t threads = uint64_t(blockDim.x) * blockDim.y * blockDim.z;
  unsigned* slot = out + 6 * (block * threads + thread);
  slot[0] = threadIdx.x;
  slot[1] = threadIdx.y;
  slot[2] = threadIdx.z;
  slot[3] = blockIdx.x;
  slot[4] = blockIdx.y;
  slot[5] = blockIdx.z;
}

struct Dims {
  dim3 grid, block;
};

class SimIndexing : public ::testing::TestWithParam<Dims> {};

TEST_P(SimIndexing, EveryThreadOfEveryBlockRunsOnceWithItsIndices) {
  const Dims d = GetParam();
  const size_t threads = size_t(d.block.x) * d.block.y * d.block.z;
  const size_t blocks = size_t(d.grid.x) * d.grid.y * d.grid.z;
  sim::DeviceBuffer<unsigned> out(6 * threads * blocks, "indices");
  launch(record_indices, config(d.grid, d.block, "record_indices"), out.data());
  size_t slot = 0;
  for (unsigned bz = 0; bz < d.grid.z; ++bz)
    for (unsigned by = 0; by < d.grid.y; ++by)
      for (unsigned bx = 0; bx < d.grid.x; ++bx)
        for (unsigned tz = 0; tz < d.block.z; ++tz)
          for (unsigned ty = 0; ty < d.block.y; ++ty)
            for (unsigned tx = 0; tx < d.block.x; ++tx, ++slot) {
              const unsigned* s = &out[6 * slot];
              ASSERT_EQ(s[0], tx);
              ASSERT_EQ(s[1], ty);
              ASSERT_EQ(s[2], tz);
              ASSERT_EQ(s[3], bx);
              ASSERT_EQ(s[4], by);
              ASSERT_EQ(s[5], bz);
            }
}

INSTANTIATE_TEST_SUITE_P(Grids, SimIndexing,
                         ::testing::Values(Dims{dim3(3), dim3(5)}, Dims{dim3(2, 3), dim3(4, 3)},
                                           Dims{dim3(2, 2, 3), dim3(3, 2, 4)},
                                           Dims{dim3(1), dim3(1024)}, Dims{dim3(5), dim3(33)},
                                           Dims{dim3(1, 1, 2), dim3(2, 2, 64)}));

__global__ void nothing() {}

TEST(SimLaunch, RejectsConfigurationsTheGpuRejects) {
  expect_error([] { launch(nothing, config(dim3(1), dim3(1025), "too_wide")); },
               {"kernel 'too_wide'", "block (1025,1,1)", "maximum block dimension x = 1024"});
  expect_error([] { launch(nothing, config(dim3(1), dim3(32, 32, 2), "too_many")); },
               {"kernel 'too_many'", "2048 threads, over the maximum of 1024"});
  expect_error([] { launch(nothing, config(dim3(1), dim3(1, 1, 65), "deep")); },
               {"kernel 'deep'", "block dimension z = 64"});
  expect_error([] { launch(nothing, config(dim3(0), dim3(32), "empty")); },
               {"kernel 'empty'", "must be positive"});
  expect_error([] { launch(nothing, config(dim3(1, 65536), dim3(32), "tall")); },
               {"kernel 'tall'", "grid dimension y = 65535"});
  expect_error([] { launch(nothing, config(dim3(1), dim3(32), "greedy", 228 * 1024)); },
               {"kernel 'greedy'", "233472 bytes of dynamic shared memory"});
}

TEST(SimLaunch, ASmallerModelledGpuLowersTheSharedMemoryLimit) {
  sim::SimOptions o;
  o.max_shared_bytes_per_block = 100 * 1024;
  sim::ScopedOptions scoped(o);
  expect_error([] { launch(nothing, config(dim3(1), dim3(32), "big_dynamic", 120 * 1024)); },
               {"kernel 'big_dynamic'", "122880 bytes", "limit of 102400 bytes"});
}

TEST(SimLaunch, LambdasAreKernelsAndArgumentsArePassedByValue) {
  sim::DeviceBuffer<int> out(64, "out");
  int base = 100;
  launch(
      [](int* o, int b) {
        b += int(threadIdx.x);  // a per-thread copy: other threads still see the original
        o[blockIdx.x * blockDim.x + threadIdx.x] = b;
      },
      config(dim3(2), dim3(32), "lambda"), out.data(), base);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(out[size_t(i)], 100 + i % 32);
}

TEST(SimLaunch, DeviceSpellingsOutsideAKernelAreErrors) {
  expect_error([] { __syncthreads(); }, {"outside a simulated kernel"});
  expect_error([] { (void)threadIdx.x; }, {"outside a simulated kernel"});
  expect_error([] { (void)__shfl_sync(0xffffffffu, 1, 0); }, {"outside a simulated kernel"});
}

TEST(SimLaunch, ALaunchFromInsideAKernelIsAnError) {
  expect_error(
      [] {
        launch([] { launch(nothing, config(dim3(1), dim3(1), "inner")); },
               config(dim3(1), dim3(1), "outer"));
      },
      {"kernel 'inner' launched from inside a simulated kernel"});
}

// Blocks 5 and 9 misuse a barrier; whichever host thread gets there first, block 5 is reported.
__global__ void fails_in_two_blocks() {
  if ((blockIdx.x == 5 || blockIdx.x == 9) && threadIdx.x == 0) return;
  __syncthreads();
}

TEST(SimLaunch, TheLowestFailingBlockIsReportedWhenBlocksRunInParallel) {
  sim::ScopedOptions scoped(testing::options_with(sim::Schedule::kReverse, 2));
  for (int run = 0; run < 5; ++run)
    expect_error([] { launch(fails_in_two_blocks, config(dim3(16), dim3(64), "two_bad")); },
                 {"kernel 'two_bad' block (5,0,0)"});
}

}  // namespace
}  // namespace tessera::cuda
