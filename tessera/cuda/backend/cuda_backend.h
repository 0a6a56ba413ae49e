#pragma once
// CudaBackend: core's Backend interface on one CUDA device. One source, two builds (the inline
// ABI namespace keeps them apart): the GPU library (nvcc, cudart, cuBLASLt) and the simulated
// library (host compiler; kernels run in tessera/cuda/sim). Every kernel op of the table
// (core/op_table.def) forwards to its launcher (cuda/kernels/launchers.h) on the compute
// stream; matmul goes to gemm.h (cuBLASLt on the GPU). Every Backend method has a kernel.
//
// Public entry points (registration, device selection) are in tessera/cuda/cuda.h.

#include "tessera/core/backend.h"
#include "tessera/cuda/backend/allocator.h"
#include "tessera/cuda/backend/device_context.h"
#include "tessera/cuda/stream_order.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

class CudaBackend final : public Backend, public StreamOrder {
 public:
  explicit CudaBackend(int device_index) : context_(device_index), allocator_(context_) {}

  Device device() const override { return Device::cuda(context_.index()); }
  Allocator& allocator() override { return allocator_; }
  void synchronize() override { context_.synchronize(); }
  DeviceContext& context() { return context_; }

  // StreamOrder (backend_stream_order.cpp): the streams and events a communicator orders on.
  int device_index() override { return context_.index(); }
  bool simulated() const override;
  Stream compute_stream() override { return context_.compute_stream(); }
  Stream comm_stream() override { return context_.comm_stream(); }
  Stream copy_stream() override { return context_.copy_stream(); }
  Event record_event(Stream stream) override;
  void stream_wait_event(Stream stream, Event event) override;
  bool event_done(Event event) override;
  void event_synchronize(Event event) override;
  void destroy_event(Event event) override;
  void copy_async(void* dst, const void* src, size_t bytes, bool to_host, Stream stream) override;
  void read_now(void* dst, const void* src, size_t bytes) override;
  std::shared_ptr<Storage> pinned_host_storage(size_t bytes) override;

  // Every op of the table: the kernel ops forward to their launchers (cuda_backend_ops.cpp),
  // copies, fills and GEMMs are cuda_backend_memory.cpp.
#define TESSERA_BACKEND_OP(name, params, args, front_ops) void name params override;
#include "tessera/core/op_table.def"

 private:
  cudaStream_t stream() {
    return context_.compute_stream();
  }

  DeviceContext context_;
  CudaAllocator allocator_;
};

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
