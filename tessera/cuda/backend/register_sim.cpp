// Registration of the simulated backend (tessera/cuda/cuda.h).

#include "tessera/cuda/backend/cuda_backend.h"
#include "tessera/cuda/backend/runtime.h"
#include "tessera/cuda/cuda.h"

namespace tessera::cuda {

void use_simulated_device() {
  // Never destroyed, like the CPU backend: tensors freed during static destruction still find
  // their allocator.
  static CudaBackend* backend = new CudaBackend(0);
  register_backend(DeviceType::cuda, backend);
}

void set_simulated_memory_limit(size_t bytes) {
  runtime::set_memory_limit(bytes);
}

}  // namespace tessera::cuda
