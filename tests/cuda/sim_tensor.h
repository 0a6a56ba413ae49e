#pragma once
// Tensors in simulated device memory, for testing kernel launchers directly (without going
// through a registered backend). Memory comes from sim::device_malloc, so it is fenced by guard
// bytes that every simulated launch checks, and starts as 0xff (NaN) like fresh cudaMalloc'd
// memory. The tensors report Device::cuda(0); only raw memcpy moves data in and out here, so
// nothing dispatches to a backend.

#include <cstring>

#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/tensor.h"
#include "tessera/cuda/sim/device_memory.h"

namespace tessera::cuda::testing {

// An uninitialised (NaN-filled) contiguous device tensor.
inline Tensor sim_empty(const Shape& shape, DType dtype, std::string_view name = "test tensor") {
  const size_t nbytes = size_t(shape.numel()) * dtype_size(dtype);
  void* p = sim::device_malloc(nbytes, name);
  auto storage = std::make_shared<Storage>(p, nbytes, Device::cuda(0),
                                           [](void* q) { sim::device_free(q); });
  return Tensor(storage, shape, contiguous_strides(shape), 0, dtype);
}

// A contiguous device copy of a CPU tensor (any layout; it is made contiguous first).
inline Tensor sim_copy(const Tensor& host, std::string_view name = "test tensor") {
  const Tensor c = ops::contiguous(host);
  Tensor d = sim_empty(c.shape(), c.dtype(), name);
  if (c.nbytes() > 0) std::memcpy(d.data_ptr(), c.data_ptr(), c.nbytes());
  return d;
}

// A CPU copy of a device tensor; `d` must be contiguous.
inline Tensor sim_to_host(const Tensor& d) {
  TESSERA_CHECK(d.is_contiguous(), "sim_to_host: the device tensor must be contiguous, got shape ",
                d.shape(), " strides ", d.strides());
  Tensor h = tessera::empty(d.shape(), d.dtype());
  if (d.nbytes() > 0) std::memcpy(h.data_ptr(), d.data_ptr(), d.nbytes());
  return h;
}

}  // namespace tessera::cuda::testing
