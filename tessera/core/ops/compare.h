#pragma once
// Comparisons for tests and tools: |a - b| <= atol + rtol * |b|, elementwise, computed in f64.

#include <string>

#include "tessera/core/tensor.h"

namespace tessera {

struct CloseReport {
  bool ok = true;
  double max_abs_error = 0.0;
  double max_rel_error = 0.0;  // |a - b| / |b| at the worst element
  int64_t worst_index = -1;    // flat index of the element furthest outside tolerance
  std::string message;         // empty when ok
};

// Shapes must match; dtypes and devices may differ. NaN never matches (not even NaN).
CloseReport compare_close(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
// Bitwise equality of values (same dtype and shape).
bool equal(const Tensor& a, const Tensor& b);

}  // namespace tessera
