#pragma once
// The kernel launchers of tessera/cuda/kernels/ on the device the tests run on
// (tests/support/cuda_test_device.h): the simulated build in CI, the GPU build with
// TESSERA_TEST_CUDA=gpu. A test calls kernels().layernorm_forward(...) exactly as it would call
// the launcher, minus the stream: the GPU build runs on the backend's compute stream, which
// device tensors (tests/cuda/kernel_compare.h) are also allocated and copied on, so a host
// read after a launch sees its result.
//
// Launchers, not Backend methods: they are what the kernel files export, and some differ from
// the Backend on purpose (Backend::copy takes a memcpy for same-dtype contiguous tensors and
// checks no shapes; the copy launcher does both itself).

#include <cstdint>
#include <vector>

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"

namespace tessera::cuda::testing {

class DeviceKernels {
 public:
  virtual ~DeviceKernels() = default;

  // One per kernel op of the op table, with the launcher's parameters minus the stream.
#define TESSERA_KERNEL_OP(name, params, args, front_ops) virtual void name params = 0;
#include "tessera/core/op_table.def"
  // The copy launcher (the Backend method is a backend op: it takes a memcpy where it can).
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
};

// The launchers of the device cuda_test_device() chose (it registers that device's backend).
DeviceKernels& kernels();

}  // namespace tessera::cuda::testing
