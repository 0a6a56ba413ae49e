#pragma once
// Helpers for the kernel-family tests (norm, cross-entropy, attention, AdamW): random host
// tensors and an element-wise comparison with a tolerance of |ref| * rtol + atol that reports
// the worst element. Device tensors are in tests/cuda/device_tensor.h.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/random.h"
#include "tessera/core/tensor.h"
#include "tests/cuda/device_tensor.h"

namespace tessera::cuda::testing {

// Normal(0, std) values in `dtype` on the host.
inline Tensor host_randn(const Shape& shape, DType dtype, uint64_t seed, double std = 1.0) {
  Generator gen(seed);
  return ops::cast(randn(shape, gen, DType::f32, Device::cpu(), 0.0, std), dtype);
}

// The relative tolerance of a kernel whose f32 and f64 results differ from the CPU's by
// round-off (the caller's f32 and f64 bounds, derived where it is used) and whose 16-bit
// results are those f32 values rounded: a last-bit difference can flip the final rounding, one
// ulp of bf16 / f16 (2^-8 / 2^-11), doubled.
inline double rtol_by_dtype(DType dtype, double f32, double f64) {
  return dtype == DType::f64    ? f64
         : dtype == DType::bf16 ? 2.0 / 256.0
         : dtype == DType::f16  ? 2.0 / 2048.0
                                : f32;
}

// Expects |got - ref| <= atol + rtol * |ref| element-wise (both on the host, same shape; any
// dtypes, compared in double). NaN matches only NaN; infinities must match exactly.
inline void expect_close(const Tensor& got, const Tensor& ref, double atol, double rtol,
                         const std::string& what) {
  ASSERT_EQ(got.shape(), ref.shape()) << what;
  const std::vector<double> g = to_vector<double>(got), r = to_vector<double>(ref);
  int64_t worst = -1, failures = 0;
  double worst_excess = 0.0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(r[i]) || std::isinf(r[i])) {
      const bool same = std::isnan(r[i]) ? std::isnan(g[i]) : g[i] == r[i];
      if (!same) {
        ++failures;
        if (worst < 0) worst = int64_t(i);
      }
      continue;
    }
    const double excess = std::fabs(g[i] - r[i]) - (atol + rtol * std::fabs(r[i]));
    if (!(excess <= 0.0)) {
      ++failures;
      if (worst < 0 || excess > worst_excess || std::isnan(excess)) {
        worst = int64_t(i);
        worst_excess = excess;
      }
    }
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " of " << g.size()
                         << " elements out of tolerance; worst at flat index " << worst << ": got "
                         << (worst >= 0 ? g[size_t(worst)] : 0.0) << ", expected "
                         << (worst >= 0 ? r[size_t(worst)] : 0.0) << " (atol " << atol << ", rtol "
                         << rtol << ")";
}

}  // namespace tessera::cuda::testing
