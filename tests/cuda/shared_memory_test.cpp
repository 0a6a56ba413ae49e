// Shared memory in the simulator: one allocation per declaration and block, the same for every
// thread; blocks running in parallel have their own; static and dynamic memory coexist; limits
// and out-of-bounds indices are reported naming the declaration; unwritten memory is poison.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tessera/cuda/device.h"
#include "tessera/cuda/sim/device_memory.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::config;
using testing::expect_error;

__global__ void record_addresses(uint64_t* out) {
  TESSERA_SHARED(float, a, 64);
  TESSERA_SHARED(double, b, 3);
  out[2 * threadIdx.x] = reinterpret_cast<uintptr_t>(static_cast<float*>(a));
  out[2 * threadIdx.x + 1] = reinterpret_cast<uintptr_t>(static_cast<double*>(b));
}

TEST(SimShared, EveryThreadOfABlockGetsTheSameMemoryPerDeclaration) {
  sim::DeviceBuffer<uint64_t> out(2 * 70, "out");
  launch(record_addresses, config(dim3(1), dim3(70), "addresses"), out.data());
  for (int t = 0; t < 70; ++t) {
    EXPECT_EQ(out[size_t(2 * t)], out[0]);
    EXPECT_EQ(out[size_t(2 * t + 1)], out[1]);
  }
  EXPECT_NE(out[0], out[1]);
  EXPECT_EQ(out[0] % 16, 0u);  // declarations are 16-byte aligned, as the nvcc form asks
  EXPECT_EQ(out[1] % 16, 0u);
  EXPECT_GE(out[1], out[0] + 64 * sizeof(float));  // b does not overlap a
}

// Thread 0 of each block stores the block index; after the barrier every thread must read its
// own block's value even with blocks on several host threads.
__global__ void block_private(int* out) {
  TESSERA_SHARED(int, mine, 1);
  if (threadIdx.x == 0) mine[0] = int(blockIdx.x);
  __syncthreads();
  for (int i = 0; i < 3; ++i) __syncthreads();  // let other blocks interleave
  out[blockIdx.x * blockDim.x + threadIdx.x] = mine[0];
}

TEST(SimShared, BlocksRunningInParallelHaveTheirOwnSharedMemory) {
  sim::ScopedOptions scoped(testing::options_with(sim::Schedule::kForward, 2));
  constexpr int kBlocks = 64, kThreads = 64;
  sim::DeviceBuffer<int> out(kBlocks * kThreads, "out");
  launch(block_private, config(dim3(kBlocks), dim3(kThreads), "block_private"), out.data());
  for (int i = 0; i < kBlocks * kThreads; ++i) EXPECT_EQ(out[size_t(i)], i / kThreads);
}

// Dynamic memory first, static after it: distinct, and both usable at full size.
__global__ void static_and_dynamic(float* out, uint64_t* info) {
  TESSERA_DYNAMIC_SHARED(float, dyn);
  TESSERA_DYNAMIC_SHARED(int, dyn_as_int);  // every dynamic declaration starts at the same byte
  TESSERA_SHARED(float, fixed, 64);
  const unsigned t = threadIdx.x;
  for (unsigned i = t; i < dyn.size(); i += blockDim.x) dyn[i] = 1.0f;
  for (unsigned i = t; i < 64; i += blockDim.x) fixed[i] = 2.0f;
  __syncthreads();
  if (t == 0) {
    float sum = 0.0f;
    for (unsigned i = 0; i < dyn.size(); ++i) sum += dyn[i];
    for (unsigned i = 0; i < 64; ++i) sum += fixed[i];
    out[0] = sum;
    info[0] = dyn.size();
    info[1] = reinterpret_cast<uintptr_t>(static_cast<float*>(dyn));
    info[2] = reinterpret_cast<uintptr_t>(static_cast<int*>(dyn_as_int));
    info[3] = reinterpret_cast<uintptr_t>(static_cast<float*>(fixed));
  }
}

TEST(SimShared, StaticAndDynamicMemoryCoexist) {
  sim::DeviceBuffer<float> out(1, "out");
  sim::DeviceBuffer<uint64_t> info(4, "info");
  launch(static_and_dynamic, config(dim3(2), dim3(96), "mixed", 1000 * sizeof(float)),
         out.data(), info.data());
  EXPECT_EQ(out[0], 1000.0f + 128.0f);  // small integers: exact in f32
  EXPECT_EQ(info[0], 1000u);
  EXPECT_EQ(info[1], info[2]);
  EXPECT_GE(info[3], info[1] + 1000 * sizeof(float));
}

// A declaration inside a loop and one inside a device-function template: the same memory on
// every pass, a separate allocation per template instance.
template <int N>
__device__ int* scratch() {
  TESSERA_SHARED(int, buffer, N);
  return buffer;
}

__global__ void declarations_in_loops_and_templates(uint64_t* out) {
  uint64_t first = 0;
  for (int i = 0; i < 5; ++i) {
    TESSERA_SHARED(int, in_loop, 8);
    const auto address = reinterpret_cast<uintptr_t>(static_cast<int*>(in_loop));
    if (i == 0) first = address;
    if (address != first) out[0] = 1;
  }
  out[1] = reinterpret_cast<uintptr_t>(scratch<1>());
  out[2] = reinterpret_cast<uintptr_t>(scratch<1>());
  out[3] = reinterpret_cast<uintptr_t>(scratch<2>());
}

TEST(SimShared, ADeclarationIsOneObjectPerSiteAndTemplateInstance) {
  sim::DeviceBuffer<uint64_t> out(4, "out");
  out[0] = 0;
  launch(declarations_in_loops_and_templates, config(dim3(1), dim3(4), "decls"), out.data());
  EXPECT_EQ(out[0], 0u);
  EXPECT_EQ(out[1], out[2]);
  EXPECT_NE(out[1], out[3]);
}

__global__ void read_unwritten(float* out) {
  TESSERA_SHARED(float, never_written, 4);
  out[threadIdx.x] = never_written[threadIdx.x];
}

TEST(SimShared, UnwrittenSharedMemoryReadsAsPoison) {
  sim::DeviceBuffer<float> out(4, "out");
  launch(read_unwritten, config(dim3(1), dim3(4), "unwritten"), out.data());
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(out[size_t(i)]));
}

__global__ void too_much_static() {
  TESSERA_SHARED(float, big, 13000);
  big[threadIdx.x] = 0.0f;
}

__global__ void two_halves_too_many() {
  TESSERA_SHARED(float, first_half, 7000);
  TESSERA_SHARED(float, second_half, 7000);
  first_half[threadIdx.x] = 0.0f;
  second_half[threadIdx.x] = 0.0f;
}

__global__ void static_over_dynamic() {
  TESSERA_SHARED(float, extra, 10240);
  extra[threadIdx.x] = 0.0f;
}

TEST(SimShared, OverflowIsReportedNamingTheDeclarationAndSizes) {
  expect_error([] { launch(too_much_static, config(dim3(1), dim3(32), "too_much")); },
               {"kernel 'too_much' block (0,0,0) thread (0,0,0)", "'big'", "52000 bytes",
                "limit of 49152 bytes"});
  expect_error([] { launch(two_halves_too_many, config(dim3(1), dim3(32), "halves")); },
               {"'second_half'", "(7000 x 4 = 28000 bytes)", "56000 bytes", "limit of 49152"});
  expect_error(
      [] {
        launch(static_over_dynamic,
               config(dim3(1), dim3(32), "static_over_dynamic", 200 * 1024));
      },
      {"'extra'", "40960 bytes static + 204800 bytes dynamic", "limit of 232448 bytes"});
}

__global__ void index_out_of_bounds(int index) {
  TESSERA_SHARED(int, table, 64);
  table[threadIdx.x] = 0;
  if (threadIdx.x == 3) table[index] = 1;
}

__global__ void dynamic_out_of_bounds() {
  TESSERA_DYNAMIC_SHARED(float, dyn);
  dyn[threadIdx.x] = 0.0f;
}

TEST(SimShared, OutOfBoundsIndicesAreReportedNamingTheDeclaration) {
  expect_error([] { launch(index_out_of_bounds, config(dim3(1), dim3(32), "oob"), 64); },
               {"kernel 'oob'", "thread (3,0,0)", "index 64 is out of bounds",
                "'table' (64 elements of 4 bytes"});
  expect_error([] { launch(index_out_of_bounds, config(dim3(1), dim3(32), "oob"), -1); },
               {"index -1 is out of bounds"});
  expect_error(
      [] { launch(dynamic_out_of_bounds, config(dim3(1), dim3(32), "dyn_oob", 10 * 4)); },
      {"thread (10,0,0)", "index 10 is out of bounds", "'dyn' (10 elements"});
}

TEST(SimShared, DynamicMemoryAboveTheDefault48KiBWorksUpToTheLimit) {
  sim::DeviceBuffer<float> out(1, "out");
  sim::DeviceBuffer<uint64_t> info(4, "info");
  const size_t floats = 200 * 1024 / sizeof(float);
  launch(static_and_dynamic, config(dim3(1), dim3(256), "big", floats * sizeof(float)),
         out.data(), info.data());
  EXPECT_EQ(out[0], float(floats) + 128.0f);  // integer sum below 2^24: exact in f32
}

}  // namespace
}  // namespace tessera::cuda
