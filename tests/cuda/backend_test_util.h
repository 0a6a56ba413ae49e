#pragma once
// Shared by the CUDA backend tests: the backend of the device under test
// (tests/support/cuda_test_device.h: the simulator, or the GPU) registered for Device::cuda(),
// and host/device round trips through the front end.

#include <gtest/gtest.h>

#include "tessera/core/backend.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/cuda/cuda.h"
#include "tests/cuda/kernel_compare.h"

namespace tessera::cuda::testing {

// Registers the device's backend for every test of the suite.
class DeviceCuda : public ::testing::Test {
 protected:
  void SetUp() override { test_device(); }
  static Backend& gpu() { return backend_for(Device::cuda()); }
  static Tensor to_gpu(const Tensor& host) { return ops::to(host, Device::cuda()); }
  static Tensor to_cpu(const Tensor& device) { return ops::to(device, Device::cpu()); }
};

// Uploads outside a fixture method.
struct DeviceCudaAccess {
  static Tensor upload(const Tensor& host) { return ops::to(host, Device::cuda()); }
};

// The CPU backend's fill, for expected values of strided fills.
inline void cpu_backend_fill(const Tensor& dst, double value) {
  backend_for(Device::cpu()).fill(dst, value);
}

// Expects the same bits in two host tensors of one dtype and shape.
inline void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const Tensor g = ops::contiguous(got), w = ops::contiguous(want);
  EXPECT_EQ(std::memcmp(g.data_ptr(), w.data_ptr(), g.nbytes()), 0) << what;
}

}  // namespace tessera::cuda::testing
