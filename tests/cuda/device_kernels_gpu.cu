// The GPU build of the launcher table (device_kernels_build.h), on the backend's compute stream:
// the stream device tensors are allocated and copied on, so no extra synchronisation is needed.

#include "tests/cuda/device_kernels_build.h"

namespace tessera::cuda::testing {

DeviceKernels& gpu_kernels(void* stream) {
  static gpu_build::BuildKernels launchers(static_cast<cudaStream_t>(stream));
  return launchers;
}

}  // namespace tessera::cuda::testing
