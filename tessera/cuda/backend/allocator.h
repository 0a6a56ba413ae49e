#pragma once
// The CUDA allocator: stream-ordered allocation from the device's memory pool on the compute
// stream (runtime.h). Memory freed by a tensor returns to the pool in stream order, so the next
// kernel on the compute stream may reuse it at once while the host runs ahead; the pool keeps
// it cached (empty_cache() trims it).
//
// Counters: live and peak are the bytes handed out to tensors, as for every allocator;
// reserved is the pool's ReservedMemCurrent, read after each allocation and free, so it also
// counts the pool's rounding and cached free blocks.
//
// Memory that the communication stream still uses must not be freed before
// DeviceContext::compute_waits_for_comm(): the free is ordered on the compute stream only.

#include "tessera/core/allocator.h"
#include "tessera/cuda/backend/device_context.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(DeviceContext& context) : context_(context) {}
  Device device() const override { return Device::cuda(context_.index()); }
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  void empty_cache() override;

 private:
  void update_reserved();

  DeviceContext& context_;
};

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
