#pragma once
// Tensors on the device under test (tests/support/cuda_test_device.h), for calling kernel
// launchers directly (tests/cuda/device_kernels.h). They come from that device's backend, so
// under the simulator each is a fresh guarded buffer that every launch checks
// (backend/runtime_sim.cpp), and on a GPU they live in its memory pool, ordered on the compute
// stream. Copies go through the backend's host copies, which wait for the stream: a host read
// after a launch sees its result.

#include <cmath>
#include <limits>

#include "tessera/core/backend.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/tensor.h"
#include "tests/support/cuda_test_device.h"

namespace tessera::cuda::testing {

inline Device test_device() {
  return tessera::testing::cuda_test_device();
}

// An uninitialised contiguous device tensor, filled with NaN (-1 for integers) so that an
// element a kernel fails to write shows in the results.
inline Tensor device_empty(const Shape& shape, DType dtype) {
  Tensor d = tessera::empty(shape, dtype, test_device());
  if (d.numel() > 0)
    backend_for(d.device())
        .fill(d, is_floating(dtype) ? std::numeric_limits<double>::quiet_NaN() : -1.0);
  return d;
}

// Copies the host tensor `host` into the device tensor `dev` (same shape; any layouts).
inline void upload(const Tensor& host, const Tensor& dev) {
  if (host.numel() > 0) backend_for(dev.device()).copy_host(host, dev);
}

// A contiguous device copy of a CPU tensor (any layout).
inline Tensor device_copy(const Tensor& host) {
  Tensor d = tessera::empty(host.shape(), host.dtype(), test_device());
  upload(host, d);
  return d;
}

// A contiguous device copy of `host` that starts `shift` elements past the allocation's
// (256-byte aligned) start, so that 16-byte vector paths must not be taken (shift 0: aligned).
inline Tensor device_copy_shifted(const Tensor& host, int64_t shift) {
  const Tensor base = device_empty(Shape{host.numel() + shift}, host.dtype());
  const Tensor view(base.storage(), host.shape(), contiguous_strides(host.shape()), shift,
                    host.dtype());
  upload(host, view);
  return view;
}

// A contiguous host copy of a device tensor of any layout.
inline Tensor to_host(const Tensor& dev) {
  return ops::to(dev, Device::cpu());
}

}  // namespace tessera::cuda::testing
