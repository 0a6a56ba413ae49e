#include "tests/support/cuda_test_device.h"

#include <cstdlib>

#include "tessera/core/error.h"
#include "tessera/cuda/cuda.h"

namespace tessera::testing {

CudaTestMode cuda_test_mode() {
  const char* env = std::getenv("TESSERA_TEST_CUDA");
  const std::string mode = env != nullptr ? env : "";
  if (mode.empty() || mode == "sim") return CudaTestMode::sim;
  if (mode == "gpu") return CudaTestMode::gpu;
  if (mode == "off") return CudaTestMode::off;
  detail::throw_error("TESSERA_TEST_CUDA must be sim, gpu or off, got '", mode, "'");
}

const char* cuda_test_mode_name(CudaTestMode mode) {
  switch (mode) {
    case CudaTestMode::sim:
      return "sim";
    case CudaTestMode::gpu:
      return "gpu";
    case CudaTestMode::off:
      return "off";
  }
  return "?";
}

Device cuda_test_device() {
  const CudaTestMode mode = cuda_test_mode();
  TESSERA_CHECK(mode != CudaTestMode::off, "TESSERA_TEST_CUDA=off: no CUDA device for this test");
  if (mode == CudaTestMode::sim) {
    cuda::use_simulated_device();
    return Device::cuda(0);
  }
#if defined(TESSERA_HAS_CUDA)
  static const bool opened = [] {
    TESSERA_CHECK(cuda::device_count() > 0, "TESSERA_TEST_CUDA=gpu, but no CUDA device is visible");
    cuda::init_device(0);
    return true;
  }();
  (void)opened;
  TESSERA_CHECK(!cuda::device_is_simulated(),
                "TESSERA_TEST_CUDA=gpu, but a simulator test registered the simulated backend "
                "over the GPU: leave the Sim* suites out (--gtest_filter='-Sim*:*/Sim*')");
  return Device::cuda(0);
#else
  detail::throw_error(
      "TESSERA_TEST_CUDA=gpu, but this build has no GPU backend "
      "(configure with TESSERA_WITH_CUDA=ON where nvcc exists)");
#endif
}

bool cuda_test_on_gpu() {
  return cuda_test_mode() == CudaTestMode::gpu;
}

}  // namespace tessera::testing
