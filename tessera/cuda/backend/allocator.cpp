#include "tessera/cuda/backend/allocator.h"

#include <algorithm>

#include "tessera/core/error.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

void* CudaAllocator::allocate(size_t nbytes) {
  // A zero-byte tensor still gets a distinct block, so that its storage has an address.
  void* p = runtime::malloc_async(std::max<size_t>(nbytes, 1), context_.index(),
                                  context_.compute_stream());
  if (p == nullptr) {
    update_reserved();
    throw_out_of_memory(
        nbytes, str_cat("the device has ",
                        runtime::device_properties(context_.index()).total_memory, " bytes"));
  }
  record_allocate(nbytes);
  update_reserved();
  return p;
}

void CudaAllocator::deallocate(void* ptr, size_t nbytes) {
  if (ptr == nullptr) return;
  runtime::free_async(ptr, context_.compute_stream());
  record_deallocate(nbytes);
  update_reserved();
}

void CudaAllocator::empty_cache() {
  runtime::trim_pool(context_.index());
  update_reserved();
}

void CudaAllocator::update_reserved() {
  const int64_t reserved = runtime::pool_usage(context_.index()).reserved_bytes;
  record_reserved(reserved - stats().reserved_bytes);
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
