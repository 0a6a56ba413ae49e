#pragma once
// Temporary device memory for a launcher's multi-pass kernels (per-block partials, sort
// buffers). On the GPU it is stream-ordered (cudaMallocAsync / cudaFreeAsync from the
// device's memory pool, so it costs no synchronisation and is normally a pool hit); in the
// simulator it is guarded device memory, so an overrun of scratch is caught like any other.
// A count of 0 allocates nothing and data() is null (a kernel can test for an unwanted output).

#include <cstddef>

#include "tessera/core/error.h"
#include "tessera/cuda/device.h"
#if !defined(__CUDACC__)
#include "tessera/cuda/sim/device_memory.h"
#include "tessera/cuda/sim/streams.h"
#endif

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

template <class T>
class DeviceScratch {
 public:
  DeviceScratch(size_t count, cudaStream_t stream, const char* name) : stream_(stream) {
    if (count == 0) return;
    const size_t bytes = count * sizeof(T);
#if defined(__CUDACC__)
    void* p = nullptr;
    const cudaError_t status = cudaMallocAsync(&p, bytes, stream);
    TESSERA_CHECK(status == cudaSuccess, name, ": cannot allocate ", bytes,
                  " bytes of scratch device memory: ", cudaGetErrorString(status));
    data_ = static_cast<T*>(p);
#else
    data_ = static_cast<T*>(sim::device_malloc(bytes, name));
#endif
  }
  ~DeviceScratch() {
    if (data_ == nullptr) return;
#if defined(__CUDACC__)
    cudaFreeAsync(data_, stream_);  // an error here would already have surfaced at a launch
#else
    // After the stream's queued work (sim/streams.h), which may still read it.
    sim::submit(stream_, [p = static_cast<void*>(data_)] { sim::device_free(p); });
#endif
  }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;

  T* data() const {
    return data_;
  }

 private:
  T* data_ = nullptr;
  cudaStream_t stream_;
};

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
