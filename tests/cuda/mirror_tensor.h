#pragma once
// Kernel-vs-CPU test helpers: a Mirror is one random buffer held twice, on the host and in
// device memory (tests/cuda/device_tensor.h), with a view of the same layout (shape, strides,
// offset) on each. A test runs the CPU backend on the host view and a launcher on the device view,
// then compares the WHOLE buffers: that checks the values and also that nothing outside the view
// was written.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "tessera/core/backend.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/random.h"
#include "tessera/core/tensor.h"
#include "tests/cuda/kernel_compare.h"

namespace tessera::cuda::testing {

struct Mirror {
  Tensor host_buf;  // contiguous 1-d, on the CPU
  Tensor dev_buf;   // the same bytes on the device under test
  Tensor host;      // the view on host_buf
  Tensor dev;       // the same view on dev_buf
};

// The smallest buffer that holds every element of the layout (strides >= 0).
inline int64_t span_of(const Shape& shape, const Strides& strides, int64_t offset) {
  int64_t last = offset;
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return offset;
    last += (shape[d] - 1) * strides[d];
  }
  return last + 1;
}

inline Tensor view_of(const Tensor& buf, const Shape& shape, const Strides& strides,
                      int64_t offset) {
  return Tensor(buf.storage(), shape, strides, offset, buf.dtype());
}

// A buffer of uniform values in [lo, hi), rounded down to multiples of `quantum` when it is
// positive (to integers for integer dtypes), viewed with the given layout on both sides.
inline Mirror mirror(const Shape& shape, const Strides& strides, int64_t offset, DType dtype,
                     uint64_t seed, double lo = -2.0, double hi = 2.0, double quantum = 0.0) {
  Generator gen(seed);
  const int64_t n = span_of(shape, strides, offset);
  Tensor u = ops::mul(tessera::rand(Shape{n}, gen, DType::f64), hi - lo);
  u = ops::add(u, lo);
  if (!is_floating(dtype) && quantum <= 0.0) quantum = 1.0;
  if (quantum > 0.0) {
    double* p = u.data<double>();
    for (int64_t i = 0; i < n; ++i) p[i] = std::floor(p[i] / quantum) * quantum;
  }
  Mirror m;
  m.host_buf = ops::contiguous(ops::cast(u, dtype));
  m.dev_buf = device_copy(m.host_buf);
  m.host = view_of(m.host_buf, shape, strides, offset);
  m.dev = view_of(m.dev_buf, shape, strides, offset);
  return m;
}

// Copies the host buffer to the device buffer again, after a test changed it.
inline void upload(const Mirror& m) {
  upload(m.host_buf, m.dev_buf);
}

// A contiguous mirror.
inline Mirror mirror(const Shape& shape, DType dtype, uint64_t seed, double lo = -2.0,
                     double hi = 2.0, double quantum = 0.0) {
  return mirror(shape, contiguous_strides(shape), 0, dtype, seed, lo, hi, quantum);
}

inline Backend& cpu_backend() {
  return backend_for(Device::cpu());
}

// Every element of the device buffer within atol + rtol * |expected| of the host buffer (NaN
// matches NaN, an infinity only itself).
inline void expect_near(const Mirror& m, double rtol, double atol, const std::string& what) {
  expect_close(to_host(m.dev_buf), m.host_buf, atol, rtol, what);
}

// The device buffer has exactly the host buffer's bytes.
inline void expect_same_bits(const Mirror& m, const std::string& what) {
  const Tensor got = to_host(m.dev_buf);
  ASSERT_EQ(got.nbytes(), m.host_buf.nbytes());
  EXPECT_EQ(std::memcmp(got.data_ptr(), m.host_buf.data_ptr(), got.nbytes()), 0)
      << what << ": device and cpu bytes differ";
}

}  // namespace tessera::cuda::testing
