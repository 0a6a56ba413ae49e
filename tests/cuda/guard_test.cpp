// Guard bytes around simulated device buffers: a planted out-of-bounds write is caught right
// after the launch, naming the kernel, the buffer and the first overwritten byte.

#include <gtest/gtest.h>

#include <cmath>

#include "tessera/cuda/device.h"
#include "tessera/cuda/sim/device_memory.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::config;
using testing::expect_error;

__global__ void write_one_past_the_end(float* out, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i <= n) out[i] = 1.0f;  // planted bug: <= instead of <
}

__global__ void write_before_the_start(float* out) {
  if (threadIdx.x == 0) out[-2] = 0.0f;  // planted bug
}

TEST(SimGuards, APlantedOutOfBoundsWriteIsCaughtAfterTheLaunch) {
  sim::DeviceBuffer<float> untouched(10, "untouched");
  sim::DeviceBuffer<float> out(100, "out");
  expect_error(
      [&] {
        launch(write_one_past_the_end, config(dim3(1), dim3(128), "one_past"), out.data(), 100);
      },
      {"out-of-bounds write after kernel 'one_past'", "device buffer 'out' (400 bytes)",
       "4 guard bytes overwritten", "the first at byte offset 400 (0 bytes past its end)"});
  // The guards were restored: the overrun is reported once.
  sim::check_guards("later");
  expect_error(
      [&] { launch(write_before_the_start, config(dim3(1), dim3(32), "before"), out.data()); },
      {"kernel 'before'", "device buffer 'out'", "byte offset -8 (8 bytes before its start)"});
}

TEST(SimGuards, ChecksCanBeLeftToTheCaller) {
  sim::SimOptions o;
  o.check_guards = false;
  sim::ScopedOptions scoped(o);
  sim::DeviceBuffer<float> out(5, "short");
  launch(write_one_past_the_end, config(dim3(1), dim3(32), "one_past"), out.data(), 5);
  expect_error([] { sim::check_guards("on demand"); },
               {"out-of-bounds write on demand", "'short' (20 bytes)", "byte offset 20"});
}

TEST(SimGuards, NewBuffersHoldPoisonAndFreeingIsChecked) {
  const size_t live = sim::live_device_buffers();
  {
    sim::DeviceBuffer<float> fresh(8, "fresh");
    for (size_t i = 0; i < fresh.size(); ++i) EXPECT_TRUE(std::isnan(fresh[i]));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(fresh.data()) % sim::kDeviceAlignment, 0u);
    EXPECT_EQ(sim::live_device_buffers(), live + 1);
  }
  EXPECT_EQ(sim::live_device_buffers(), live);
  int not_device_memory = 0;
  expect_error([&] { sim::device_free(&not_device_memory); },
               {"device_free", "not returned by device_malloc"});
}

}  // namespace
}  // namespace tessera::cuda
