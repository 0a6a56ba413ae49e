// The runtime over cudart. Allocation goes through the device's default memory pool
// (cudaMallocFromPoolAsync / cudaFreeAsync), stream-ordered: a block freed on the compute
// stream is reused by later work on that stream without a device synchronisation, and with the
// release threshold at its maximum the pool keeps freed memory instead of returning it at
// every synchronisation.

#include <cstdint>

#include "tessera/cuda/backend/cuda_check.h"
#include "tessera/cuda/backend/runtime.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace runtime {
namespace {

cudaMemPool_t default_pool(int device) {
  cudaMemPool_t pool;
  TESSERA_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  return pool;
}

int64_t pool_attribute(int device, cudaMemPoolAttr attr) {
  uint64_t value = 0;
  TESSERA_CUDA_CHECK(cudaMemPoolGetAttribute(default_pool(device), attr, &value));
  return int64_t(value);
}

cudaMemcpyKind memcpy_kind(CopyKind kind) {
  switch (kind) {
    case CopyKind::host_to_device:
      return cudaMemcpyHostToDevice;
    case CopyKind::device_to_host:
      return cudaMemcpyDeviceToHost;
    case CopyKind::device_to_device:
      break;
  }
  return cudaMemcpyDeviceToDevice;
}

}  // namespace

int device_count() {
  int count = 0;
  // No driver, or no device, is an answer here rather than an error.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

DeviceProperties device_properties(int device) {
  cudaDeviceProp prop;
  TESSERA_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  DeviceProperties p;
  p.name = prop.name;
  p.major = prop.major;
  p.minor = prop.minor;
  p.multiprocessors = prop.multiProcessorCount;
  p.total_memory = prop.totalGlobalMem;
  return p;
}

void set_device(int device) {
  int current = -1;
  TESSERA_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) TESSERA_CUDA_CHECK(cudaSetDevice(device));
}

void configure_pool(int device) {
  uint64_t threshold = UINT64_MAX;
  TESSERA_CUDA_CHECK(
      cudaMemPoolSetAttribute(default_pool(device), cudaMemPoolAttrReleaseThreshold, &threshold));
}

void* malloc_async(size_t bytes, int device, cudaStream_t stream) {
  void* p = nullptr;
  const cudaError_t status = cudaMallocFromPoolAsync(&p, bytes, default_pool(device), stream);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // not sticky: clear it, and let the allocator say what failed
    return nullptr;
  }
  TESSERA_CUDA_CHECK(status);
  return p;
}

void free_async(void* p, cudaStream_t stream) {
  if (p != nullptr) TESSERA_CUDA_CHECK(cudaFreeAsync(p, stream));
}

PoolUsage pool_usage(int device) {
  return {pool_attribute(device, cudaMemPoolAttrUsedMemCurrent),
          pool_attribute(device, cudaMemPoolAttrReservedMemCurrent)};
}

void trim_pool(int device) {
  TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
  TESSERA_CUDA_CHECK(cudaMemPoolTrimTo(default_pool(device), 0));
}

void memcpy_async(void* dst, const void* src, size_t bytes, CopyKind kind, cudaStream_t stream) {
  if (bytes > 0) TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, memcpy_kind(kind), stream));
}

void memcpy_to_host_now(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cudaStreamPerThread));
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
}

void memset_async(void* dst, int byte, size_t bytes, cudaStream_t stream) {
  if (bytes > 0) TESSERA_CUDA_CHECK(cudaMemsetAsync(dst, byte, bytes, stream));
}

void* host_alloc_pinned(size_t bytes) {
  void* p = nullptr;
  const cudaError_t status = cudaMallocHost(&p, bytes > 0 ? bytes : 1);
  TESSERA_CHECK(status == cudaSuccess, "cudaMallocHost of ", bytes,
                " bytes of page-locked host memory failed: ", cudaGetErrorString(status));
  return p;
}

void host_free_pinned(void* p) {
  if (p != nullptr) TESSERA_CUDA_CHECK(cudaFreeHost(p));
}

cudaStream_t stream_create() {
  cudaStream_t stream;
  TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}
void stream_destroy(cudaStream_t stream) {
  TESSERA_CUDA_CHECK(cudaStreamDestroy(stream));
}
void stream_synchronize(cudaStream_t stream) {
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream));
}

Event event_create() {
  cudaEvent_t event;
  TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}
void event_destroy(Event event) {
  TESSERA_CUDA_CHECK(cudaEventDestroy(event));
}
void event_record(Event event, cudaStream_t stream) {
  TESSERA_CUDA_CHECK(cudaEventRecord(event, stream));
}
void stream_wait_event(cudaStream_t stream, Event event) {
  TESSERA_CUDA_CHECK(cudaStreamWaitEvent(stream, event, 0));
}
void event_synchronize(Event event) {
  TESSERA_CUDA_CHECK(cudaEventSynchronize(event));
}
bool event_query(Event event) {
  const cudaError_t status = cudaEventQuery(event);
  if (status == cudaErrorNotReady) return false;
  TESSERA_CUDA_CHECK(status);
  return true;
}
void device_synchronize() {
  TESSERA_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace runtime
}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
