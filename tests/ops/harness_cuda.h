#pragma once
// The op harness's CUDA mode (used by OpOnDevice in harness_test.cpp): which CUDA device the
// cases run on, device copies that keep an input's layout, and the list of ops the CUDA
// backend does not implement yet (skipped, never counted as passing, printed at the end).

#include <optional>
#include <string>

#include "tessera/tessera.h"

namespace tessera::testing {

// The CUDA device for the harness: the one TESSERA_TEST_CUDA names (the simulator unless
// "gpu"; see tests/support/cuda_test_device.h). Empty when TESSERA_TEST_CUDA is "off".
std::optional<Device> harness_cuda_device();
// Trials per case on the device: every trial on a GPU, fewer under the simulator (each
// simulated thread is a fiber; the shapes are the same either way).
int device_trials(int case_trials);

// A copy of `t` on `device` with t's shape, strides and offset, over a device copy of t's
// whole storage: non-contiguous and offset views reach the kernels as they are.
Tensor to_device_same_layout(const Tensor& t, Device device);

// True for the error a backend throws for an op it lacks (Backend::not_implemented).
bool is_not_implemented(const Error& error);
// Records a case whose op is missing on the device; the list is printed after all tests.
void record_not_implemented(const std::string& case_name, const std::string& message);

}  // namespace tessera::testing
