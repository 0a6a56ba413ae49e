// The simulator's streams (tessera/cuda/sim/streams.h) through the simulated runtime: in
// deferred mode work waits on its stream until a synchronisation or an event wait needs it, so
// a missing stream_wait_event between a producer stream and a consumer stream reads data the
// producer has not written, which immediate mode (the host's call order) would hide.

#include <gtest/gtest.h>

#include <vector>

#include "tessera/cuda/backend/runtime.h"
#include "tessera/cuda/sim/device_memory.h"
#include "tessera/cuda/sim/streams.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::config;

constexpr int kN = 300;

__global__ void write_ramp(float* x, int n, float base) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] = base + float(i);
}

__global__ void copy_values(const float* x, float* y, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = x[i];
}

// Appends `tag` to log[1 + log[0]++]: the order kernels ran in.
__global__ void append_tag(int* log, int tag) {
  const int k = log[0]++;
  log[1 + k] = tag;
}

LaunchConfig on(cudaStream_t stream, const char* name) {
  LaunchConfig c = config(dim3((kN + 127) / 128), dim3(128), name);
  c.stream = stream;
  return c;
}

// Producer on stream a writes x; consumer on stream b copies x into y, after b waits for an
// event recorded on a when `wait`; then the host synchronises b only. Returns y.
std::vector<float> produce_then_consume(bool wait) {
  const cudaStream_t a = runtime::stream_create(), b = runtime::stream_create();
  sim::DeviceBuffer<float> x(std::vector<float>(kN, -1.0f), "x");
  sim::DeviceBuffer<float> y(std::vector<float>(kN, -2.0f), "y");
  Event produced = runtime::event_create();
  launch(write_ramp, on(a, "write_ramp"), x.data(), kN, 10.0f);
  runtime::event_record(produced, a);
  if (wait) runtime::stream_wait_event(b, produced);
  launch(copy_values, on(b, "copy_values"), x.data(), y.data(), kN);
  runtime::stream_synchronize(b);
  std::vector<float> got = y.to_vector();
  runtime::device_synchronize();  // every stream empty before the buffers go
  runtime::event_destroy(produced);
  runtime::stream_destroy(a);
  runtime::stream_destroy(b);
  return got;
}

std::vector<float> ramp() {
  std::vector<float> r(kN);
  for (int i = 0; i < kN; ++i) r[size_t(i)] = 10.0f + float(i);
  return r;
}

TEST(SimStreams, DeferredWorkRunsWhenItsStreamIsSynchronised) {
  const sim::ScopedStreamMode deferred(sim::StreamMode::deferred);
  const cudaStream_t s = runtime::stream_create();
  sim::DeviceBuffer<float> x(std::vector<float>(kN, -1.0f), "x");
  launch(write_ramp, on(s, "write_ramp"), x.data(), kN, 10.0f);
  EXPECT_EQ(x[0], -1.0f) << "a deferred launch ran before anything needed it";
  runtime::stream_synchronize(s);
  EXPECT_EQ(x.to_vector(), ramp());
  runtime::stream_destroy(s);
}

TEST(SimStreams, AnEventWaitOrdersTheConsumerAfterTheProducer) {
  const sim::ScopedStreamMode deferred(sim::StreamMode::deferred);
  EXPECT_EQ(produce_then_consume(/*wait=*/true), ramp());
}

// The planted bug: no stream_wait_event between the streams. Deferred mode shows it (the
// consumer copies x before the producer wrote it); immediate mode runs the host's order and
// hides it, which is why the multi-stream code is tested in deferred mode.
TEST(SimStreams, AMissingEventWaitReadsUnwrittenDataInDeferredModeOnly) {
  {
    const sim::ScopedStreamMode deferred(sim::StreamMode::deferred);
    EXPECT_EQ(produce_then_consume(/*wait=*/false), std::vector<float>(kN, -1.0f));
  }
  const sim::ScopedStreamMode immediate(sim::StreamMode::immediate);
  EXPECT_EQ(produce_then_consume(/*wait=*/false), ramp());
}

TEST(SimStreams, DeviceSynchronizeRunsTheLatestStreamFirst) {
  const sim::ScopedStreamMode deferred(sim::StreamMode::deferred);
  const cudaStream_t first = runtime::stream_create(), second = runtime::stream_create();
  sim::DeviceBuffer<int> log(std::vector<int>(8, 0), "log");
  auto one_thread = [](cudaStream_t stream) {
    LaunchConfig c = config(dim3(1), dim3(1), "append_tag");
    c.stream = stream;
    return c;
  };
  launch(append_tag, one_thread(first), log.data(), 1);
  launch(append_tag, one_thread(second), log.data(), 2);
  runtime::device_synchronize();
  EXPECT_EQ(log[0], 2);
  EXPECT_EQ(log[1], 2) << "the stream used last runs first";
  EXPECT_EQ(log[2], 1);
  runtime::stream_destroy(first);
  runtime::stream_destroy(second);
}

// A stream-ordered free waits for the work queued before it: the kernel still writes a live
// block (the guard check after the launch would name a freed one).
TEST(SimStreams, AStreamOrderedFreeWaitsForTheWorkBeforeIt) {
  const sim::ScopedStreamMode deferred(sim::StreamMode::deferred);
  const cudaStream_t s = runtime::stream_create();
  const int64_t before = runtime::pool_usage(0).used_bytes;
  auto* p = static_cast<float*>(runtime::malloc_async(kN * sizeof(float), 0, s));
  launch(write_ramp, on(s, "write_ramp"), p, kN, 10.0f);
  runtime::free_async(p, s);
  EXPECT_EQ(runtime::pool_usage(0).used_bytes - before, int64_t(kN * sizeof(float)))
      << "the block went back before the kernel that writes it ran";
  runtime::stream_synchronize(s);
  EXPECT_EQ(runtime::pool_usage(0).used_bytes, before);
  runtime::stream_destroy(s);
}

TEST(SimStreams, TheNullStreamRunsEveryOtherStreamFirst) {
  const sim::ScopedStreamMode deferred(sim::StreamMode::deferred);
  const cudaStream_t s = runtime::stream_create();
  sim::DeviceBuffer<float> x(std::vector<float>(kN, -1.0f), "x");
  sim::DeviceBuffer<float> y(std::vector<float>(kN, -2.0f), "y");
  launch(write_ramp, on(s, "write_ramp"), x.data(), kN, 10.0f);
  launch(copy_values, on(nullptr, "copy_values"), x.data(), y.data(), kN);  // legacy default
  EXPECT_EQ(y.to_vector(), ramp());
  runtime::stream_destroy(s);
}

}  // namespace
}  // namespace tessera::cuda
