// Misuse the simulator reports instead of hanging: barriers in divergent code, threads that
// leave before a barrier, warp collectives waiting for lanes that exited or disagreeing on the
// collective, and a genuine deadlock. Each report names the kernel, the block and the threads.

#include <gtest/gtest.h>

#include <string>

#include "tessera/cuda/device.h"
#include "tessera/cuda/sim/device_memory.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::config;
using testing::expect_error;

constexpr unsigned kFull = 0xffffffffu;

__global__ void divergent_barrier(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
    out[threadIdx.x] = 1;
  } else {
    __syncthreads();
    out[threadIdx.x] = 2;
  }
}

TEST(SimMisuse, ThreadsWaitingAtDifferentBarriersAreReported) {
  sim::DeviceBuffer<int> out(32, "out");
  const std::string message = expect_error(
      [&] { launch(divergent_barrier, config(dim3(2), dim3(32), "divergent"), out.data()); },
      {"kernel 'divergent' block (0,0,0) thread (16,0,0)",
       "waits at __syncthreads() at ", "misuse_test.cpp:", "while 16 threads: (0,0,0)..(15,0,0)",
       "divergent branch"});
  EXPECT_NE(message.find("misuse_test.cpp:23"), std::string::npos) << message;  // the first
  EXPECT_NE(message.find("misuse_test.cpp:26"), std::string::npos) << message;  // the second
}

__global__ void early_return(float* out, int n) {
  const int i = int(threadIdx.x);
  if (i >= n) return;  // planted: these threads never reach the barrier below
  out[i] = 1.0f;
  __syncthreads();
  out[i] = 2.0f;
}

TEST(SimMisuse, AReturnBeforeABarrierIsReportedWhicheverThreadsRunFirst) {
  sim::DeviceBuffer<float> out(32, "out");
  {
    sim::ScopedOptions scoped(testing::options_with(sim::Schedule::kForward));
    expect_error([&] { launch(early_return, config(dim3(1), dim3(32), "early"), out.data(), 20); },
                 {"kernel 'early' block (0,0,0) thread (20,0,0)",
                  "exits while 20 threads: (0,0,0)..(19,0,0) wait at __syncthreads()",
                  "a return before the barrier?"});
  }
  {
    sim::ScopedOptions scoped(testing::options_with(sim::Schedule::kReverse));
    expect_error([&] { launch(early_return, config(dim3(1), dim3(32), "early"), out.data(), 20); },
                 {"thread (19,0,0)", "reaches __syncthreads() at",
                  "after 12 threads: (20,0,0)..(31,0,0) exited"});
  }
}

__global__ void shuffle_after_lane_exits(int* out, int gone) {
  const int lane = int(threadIdx.x);
  if (lane == gone) return;
  out[lane] = __shfl_sync(kFull, lane, 0);
}

TEST(SimMisuse, AWarpCollectiveNamingAnExitedLaneIsReported) {
  sim::DeviceBuffer<int> out(32, "out");
  // Lanes 0-4 are waiting when lane 5 leaves.
  expect_error(
      [&] {
        launch(shuffle_after_lane_exits, config(dim3(1), dim3(32), "lost_lane"), out.data(), 5);
      },
      {"thread (5,0,0)", "exits while lanes 0-4 of warp 0 wait for it in __shfl_sync",
       "mask 0xffffffff"});
  // Lane 0 has left before lane 1 arrives.
  expect_error(
      [&] {
        launch(shuffle_after_lane_exits, config(dim3(1), dim3(32), "lost_lane"), out.data(), 0);
      },
      {"thread (1,0,0)", "__shfl_sync at", "waits for lanes 0 of warp 0, which have exited"});
}

// The low half-warp waits for all 32 lanes; the high half runs a ballot of its own and leaves.
__global__ void masks_disagree(unsigned* out) {
  const int lane = int(threadIdx.x);
  out[lane] = lane < 16 ? __ballot_sync(kFull, 1) : __ballot_sync(0xffff0000u, 1);
}

__global__ void collectives_disagree(unsigned* out) {
  const int lane = int(threadIdx.x);
  out[lane] = lane % 2 == 0 ? unsigned(__shfl_sync(kFull, lane, 0)) : __ballot_sync(kFull, 1);
}

__global__ void mask_without_caller(int* out) {
  out[threadIdx.x] = __shfl_sync(0x1u, int(threadIdx.x), 0);
}

TEST(SimMisuse, LanesThatDisagreeOnACollectiveAreReported) {
  sim::DeviceBuffer<unsigned> out(32, "out");
  expect_error([&] { launch(masks_disagree, config(dim3(1), dim3(32), "masks"), out.data()); },
               {"thread (31,0,0)", "exits while lanes 0-15 of warp 0 wait for it in __ballot_sync",
                "mask 0xffffffff"});
  expect_error(
      [&] { launch(collectives_disagree, config(dim3(1), dim3(32), "kinds"), out.data()); },
      {"thread (1,0,0)", "__ballot_sync at", "while lanes 0 of warp 0 wait in __shfl_sync",
       "each waiting for the other", "same collective with the same mask"});
  sim::DeviceBuffer<int> ints(32, "ints");
  expect_error(
      [&] { launch(mask_without_caller, config(dim3(1), dim3(32), "no_caller"), ints.data()); },
      {"thread (1,0,0)", "mask 0x00000001", "does not include the calling lane 1"});
}

// Lane 0 waits at the barrier before the shuffle; the others wait in the shuffle for lane 0.
__global__ void barrier_versus_shuffle(int* out) {
  const int lane = int(threadIdx.x);
  if (lane == 0) __syncthreads();
  out[lane] = __shfl_sync(kFull, lane, 0);
  if (lane != 0) __syncthreads();
}

TEST(SimMisuse, ADeadlockIsReportedWithWhatEachThreadWaitsFor) {
  sim::DeviceBuffer<int> out(32, "out");
  expect_error(
      [&] { launch(barrier_versus_shuffle, config(dim3(1), dim3(32), "deadlock"), out.data()); },
      {"kernel 'deadlock' block (0,0,0): deadlock, no thread can run",
       "1 thread: (0,0,0) wait at __syncthreads() at",
       "31 threads: (1,0,0)..(31,0,0) wait in __shfl_sync at", "for lanes 0 of warp 0"});
}

__global__ void well_behaved(int* out) {
  TESSERA_SHARED(int, s, 64);
  s[threadIdx.x] = int(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = s[63 - threadIdx.x] + __shfl_xor_sync(kFull, 0, 1);
}

TEST(SimMisuse, TheSimulatorRunsNormallyAfterAnAbortedBlock) {
  sim::DeviceBuffer<int> out(64, "out");
  expect_error([&] { launch(divergent_barrier, config(dim3(1), dim3(64), "bad"), out.data()); },
               {"kernel 'bad'"});
  launch(well_behaved, config(dim3(1), dim3(64), "good"), out.data());
  for (int t = 0; t < 64; ++t) EXPECT_EQ(out[size_t(t)], 63 - t);
}

}  // namespace
}  // namespace tessera::cuda
