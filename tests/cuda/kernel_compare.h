#pragma once
// Helpers for the kernel-family tests (norm, cross-entropy, attention, AdamW): random host
// tensors, device copies at a deliberately misaligned address, and an element-wise comparison
// with a tolerance of |ref| * rtol + atol that reports the worst element.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/random.h"
#include "tessera/core/tensor.h"
#include "tests/cuda/sim_tensor.h"

namespace tessera::cuda::testing {

// Normal(0, std) values in `dtype` on the host.
inline Tensor host_randn(const Shape& shape, DType dtype, uint64_t seed, double std = 1.0) {
  Generator gen(seed);
  return ops::cast(randn(shape, gen, DType::f32, Device::cpu(), 0.0, std), dtype);
}

// A contiguous device copy of `host` that starts `shift` elements past a 256-byte aligned
// address, so that 16-byte vector paths must not be taken (shift 0: aligned).
inline Tensor sim_copy_shifted(const Tensor& host, int64_t shift, std::string_view name) {
  const Tensor c = ops::contiguous(host);
  const Shape flat{c.numel() + shift};
  Tensor base = sim_empty(flat, c.dtype(), name);
  Tensor view(base.storage(), c.shape(), contiguous_strides(c.shape()), shift, c.dtype());
  if (c.nbytes() > 0) std::memcpy(view.data_ptr(), c.data_ptr(), c.nbytes());
  return view;
}

// A host copy of a (possibly offset) contiguous device tensor.
inline Tensor sim_to_host_view(const Tensor& d) {
  Tensor h = tessera::empty(d.shape(), d.dtype());
  if (d.nbytes() > 0) std::memcpy(h.data_ptr(), d.data_ptr(), d.nbytes());
  return h;
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
