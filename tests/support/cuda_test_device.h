#pragma once
// Where the device tests run: one switch for the kernel and backend tests (tests/cuda), the op
// harness's CUDA mode (tests/ops) and GPT parity on the device. Set by the environment:
//
//   TESSERA_TEST_CUDA=sim   (or unset) the simulated backend: every kernel runs in the CPU
//                           kernel simulator (tessera/cuda/sim); what CI runs.
//   TESSERA_TEST_CUDA=gpu   the GPU backend on cuda:0; an error when this build has no GPU
//                           backend or no GPU is visible. bench/gpu_check.sh runs this way.
//   TESSERA_TEST_CUDA=off   no device cases (the op harness only; the device suites fail).
//
// In gpu mode the simulator-only suites (named Sim*) must be filtered out of the run: they
// register the simulated backend, which would replace the GPU for every later test. The device
// suites check for that and fail with a message rather than silently test the simulator.

#include <string>

#include "tessera/core/device.h"

namespace tessera::testing {

enum class CudaTestMode { sim, gpu, off };

// The mode from TESSERA_TEST_CUDA; throws naming the variable for any other value.
CudaTestMode cuda_test_mode();
const char* cuda_test_mode_name(CudaTestMode mode);

// Registers the backend of the mode (once) and returns Device::cuda(0). Throws in gpu mode
// without a GPU, in off mode, and in gpu mode when a simulator test has since registered the
// simulated backend over the GPU one.
Device cuda_test_device();
// True when cuda_test_device() is the real GPU.
bool cuda_test_on_gpu();

}  // namespace tessera::testing
