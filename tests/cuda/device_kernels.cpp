// kernels(): the simulated launchers (this file's build of device_kernels_build.h) or the GPU
// ones (device_kernels_gpu.cu), as TESSERA_TEST_CUDA chose.

#include "tests/cuda/device_kernels_build.h"
#include "tests/support/cuda_test_device.h"

#if defined(TESSERA_HAS_CUDA)
#include "tessera/cuda/cuda.h"
#endif

namespace tessera::cuda::testing {

#if defined(TESSERA_HAS_CUDA)
// device_kernels_gpu.cu: the GPU launchers on `stream` (a cudaStream_t).
DeviceKernels& gpu_kernels(void* stream);
#endif

DeviceKernels& kernels() {
  tessera::testing::cuda_test_device();  // registers the device's backend; throws without one
  if (!tessera::testing::cuda_test_on_gpu()) {
    static sim_build::BuildKernels simulated(nullptr);
    return simulated;
  }
#if defined(TESSERA_HAS_CUDA)
  return gpu_kernels(device_streams().compute);
#else
  detail::throw_error("kernels(): this build has no GPU backend");  // cuda_test_device threw
#endif
}

}  // namespace tessera::cuda::testing
