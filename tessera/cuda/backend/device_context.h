#pragma once
// One CUDA device as the backend uses it: a compute stream that every kernel, copy and
// allocation is ordered on, a communication stream (NCCL's) and a copy stream (downloads to
// host memory) ordered against it by events.
// Nothing touches the driver until the first use, so a backend can be registered at program
// start at no cost to programs that never use the GPU.

#include <mutex>

#include "tessera/cuda/backend/runtime.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

class DeviceContext {
 public:
  explicit DeviceContext(int index) : index_(index) {}
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int index() const { return index_; }
  // Each makes the device current on the calling thread (creating the streams on first use).
  cudaStream_t compute_stream();
  cudaStream_t comm_stream();
  cudaStream_t copy_stream();

  // Work queued on the communication stream after this call starts only once the work queued
  // so far on the compute stream has finished (a collective waits for the gradients it sends).
  void comm_waits_for_compute();
  // The reverse: later compute work waits for the communication queued so far (the
  // collective's result is read, or its buffers are freed back to the compute stream's pool).
  void compute_waits_for_comm();
  // Blocks the host until every stream is idle.
  void synchronize();

 private:
  void ensure_started();

  const int index_;
  std::once_flag started_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t comm_ = nullptr;
  cudaStream_t copy_ = nullptr;
  Event compute_done_ = nullptr;
  Event comm_done_ = nullptr;
};

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
