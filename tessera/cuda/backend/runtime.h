#pragma once
// The thin CUDA runtime the backend is written against. Two implementations share this header:
//   runtime_gpu.cu  cudart, every call checked by TESSERA_CUDA_CHECK (built with nvcc only);
//   runtime_sim.cpp the kernel simulator's memory (sim/device_memory.h): guarded buffers,
//                   synchronous copies, streams and events that are plain ids.
// The backend above it (device_context, allocator, cuda_backend) is one source for both builds.

#include <cstddef>
#include <cstdint>
#include <string>

#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

#if defined(__CUDACC__)
using Event = cudaEvent_t;
#else
struct SimEvent;
using Event = SimEvent*;
#endif

struct DeviceProperties {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  size_t total_memory = 0;
  bool simulated = false;
};

// Byte counts of the device's stream-ordered memory pool.
struct PoolUsage {
  int64_t used_bytes = 0;      // in live allocations
  int64_t reserved_bytes = 0;  // held from the driver, including cached free blocks
};

enum class CopyKind : uint8_t { host_to_device, device_to_host, device_to_device };

namespace runtime {

// Visible devices; 0 (never an error) when there is no driver or no GPU.
int device_count();
// The simulated runtime only: the device's memory in bytes (0: unlimited), so that tests can
// run a device out of memory.
void set_memory_limit(size_t bytes);
DeviceProperties device_properties(int device);
// Makes `device` current on the calling host thread (CUDA's current device is per thread).
void set_device(int device);

// The device's default memory pool: allocations are cached after free (release threshold at
// its maximum) so that a training step's frees feed the next step's allocations.
void configure_pool(int device);
// nullptr when the device has no memory left for it (the caller raises OutOfMemory); any other
// failure throws.
void* malloc_async(size_t bytes, int device, cudaStream_t stream);
void free_async(void* p, cudaStream_t stream);
PoolUsage pool_usage(int device);
// Returns the pool's cached free memory to the driver (waits for the device first).
void trim_pool(int device);

// Copies and fills ordered on `stream`. A device-to-host copy into pageable memory has
// finished when the call returns only after stream_synchronize(stream).
void memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind, cudaStream_t stream);
void memset_async(void* dst, int byte, size_t bytes, cudaStream_t stream);
// Copies device memory to host memory and returns once the bytes are there, on the calling
// thread's own stream (cudaStreamPerThread): ordered after none of the device's streams, so
// the caller must know that nothing queued still writes src. Callable from any host thread
// (a checkpoint writer's); the device must be current on it.
void memcpy_to_host_now(void* dst, const void* src, size_t bytes);

// Page-locked host memory (cudaMallocHost), so that copies to and from it run asynchronously
// on their stream; the simulator hands out plain 64-byte aligned host memory. Never null:
// failure throws, naming the bytes.
void* host_alloc_pinned(size_t bytes);
void host_free_pinned(void* p);

cudaStream_t stream_create();
void stream_destroy(cudaStream_t stream);
void stream_synchronize(cudaStream_t stream);
Event event_create();
void event_destroy(Event event);
void event_record(Event event, cudaStream_t stream);
// Work queued on `stream` after this call waits for `event`.
void stream_wait_event(cudaStream_t stream, Event event);
void event_synchronize(Event event);
// Whether the work before `event` has completed: cudaEventQuery on the GPU; the simulator runs
// the event's stream up to it and returns true.
bool event_query(Event event);
void device_synchronize();

}  // namespace runtime
}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
