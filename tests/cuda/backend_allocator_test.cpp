// The CUDA allocator's counters and streams, on the device under test. The simulated pool does
// not cache, so there reserved follows used exactly (backend/runtime_sim.cpp) while frees run at
// once; the GPU's pool keeps freed blocks, and deferred simulated streams free a block only when
// its stream gets there, so there reserved only bounds used from above.

#include <iostream>

#include "tessera/core/allocator.h"
#include "tessera/cuda/backend/cuda_backend.h"
#include "tessera/cuda/sim/streams.h"
#include "tests/cuda/backend_test_util.h"

namespace tessera::cuda::testing {
namespace {

using BackendAllocator = DeviceCuda;
using tessera::testing::cuda_test_on_gpu;

TEST_F(BackendAllocator, LivePeakReservedFollowTensors) {
  const bool exact = !cuda_test_on_gpu() && sim::stream_mode() == sim::StreamMode::immediate;
  Allocator& alloc = allocator_for(Device::cuda());
  EXPECT_EQ(alloc.device(), Device::cuda());
  alloc.reset_peak();
  const AllocatorStats before = alloc.stats();
  {
    Tensor a = empty({1000}, DType::f32, Device::cuda());
    const AllocatorStats one = alloc.stats();
    EXPECT_EQ(one.live_bytes - before.live_bytes, 4000);
    EXPECT_EQ(one.num_allocs - before.num_allocs, 1);
    EXPECT_GE(one.reserved_bytes, one.live_bytes);
    {
      Tensor b = empty({10, 7}, DType::bf16, Device::cuda());
      EXPECT_EQ(alloc.stats().live_bytes - before.live_bytes, 4140);
    }
    const AllocatorStats after_b = alloc.stats();
    EXPECT_EQ(after_b.live_bytes - before.live_bytes, 4000);
    EXPECT_EQ(after_b.peak_bytes - before.live_bytes, 4140);
    if (exact) {
      EXPECT_EQ(after_b.reserved_bytes, one.reserved_bytes);
    }
  }
  const AllocatorStats end = alloc.stats();
  EXPECT_EQ(end.live_bytes, before.live_bytes);
  if (exact)
    EXPECT_EQ(end.reserved_bytes, before.reserved_bytes);
  else
    EXPECT_GE(end.reserved_bytes, end.live_bytes);
  EXPECT_EQ(end.peak_bytes, before.live_bytes + 4140);
  alloc.reset_peak();
  EXPECT_EQ(alloc.stats().peak_bytes, before.live_bytes);
}

// A device out of memory is OutOfMemory naming the device, the op, the bytes and the counters:
// past a 1 MiB limit on the simulated device, past the whole GPU (2^48 floats, 1 PiB) on one.
TEST_F(BackendAllocator, OutOfMemoryNamesTheOpTheBytesAndTheCounters) {
  const bool gpu_run = cuda_test_on_gpu();
  if (!gpu_run) set_simulated_memory_limit(size_t(1) << 20);
  const int64_t n = gpu_run ? int64_t(1) << 48 : int64_t(1) << 19;
  Allocator& alloc = allocator_for(Device::cuda());
  const int64_t live = alloc.stats().live_bytes;
  std::string message;
  try {
    Tensor a = ones({8}, DType::f32, Device::cuda());
    Tensor huge = zeros({n}, DType::f32, Device::cuda());
  } catch (const OutOfMemory& e) {
    message = e.what();
  }
  if (!gpu_run) set_simulated_memory_limit(0);
  ASSERT_FALSE(message.empty()) << "no OutOfMemory for " << 4 * n << " bytes";
  std::cout << "[ out of memory ] " << message << "\n";
  for (const std::string& part :
       {std::string("out of memory on cuda:0 in zeros"), str_cat("asked for ", 4 * n, " bytes"),
        std::string(" live, "), std::string(" reserved, peak "), std::string("the device has ")})
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  EXPECT_EQ(alloc.stats().live_bytes, live);
  // The device works on after it.
  EXPECT_EQ(to_cpu(ones({1}, DType::f32, Device::cuda())).item<float>(), 1.0f);
}

TEST_F(BackendAllocator, ZeroByteTensorsHaveStorage) {
  Tensor z = empty({0, 5}, DType::f32, Device::cuda());
  EXPECT_NE(z.storage()->data(), nullptr);
  EXPECT_EQ(to_cpu(z).numel(), 0);
}

TEST_F(BackendAllocator, StreamsAreDistinctAndOrdered) {
  if (cuda_test_on_gpu()) {
#if defined(TESSERA_HAS_CUDA)
    // The public view of the GPU backend's streams (what the NCCL communicator uses).
    const DeviceStreams streams = device_streams();
    EXPECT_EQ(streams.device, 0);
    EXPECT_NE(streams.compute, nullptr);
    EXPECT_NE(streams.comm, nullptr);
    EXPECT_NE(streams.compute, streams.comm);
    EXPECT_FALSE(device_is_simulated());
    gpu().synchronize();
#endif
    return;
  }
  auto& backend = dynamic_cast<CudaBackend&>(gpu());
  DeviceContext& context = backend.context();
  EXPECT_NE(context.compute_stream(), context.comm_stream());
  // Ordering calls run without error (the simulator executes synchronously).
  context.comm_waits_for_compute();
  context.compute_waits_for_comm();
  backend.synchronize();
  EXPECT_TRUE(runtime::device_properties(0).simulated);
  EXPECT_THROW(runtime::device_properties(1), Error);
}

}  // namespace
}  // namespace tessera::cuda::testing
