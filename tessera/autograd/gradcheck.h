#pragma once
// gradcheck: compares the tape's gradients with central finite differences, in f64.
//
// The function's output is reduced to a scalar by a fixed random projection, so every output
// element's gradient path is exercised; each input element that requires grad is perturbed
// by +-eps through its own (possibly strided) view.

#include <functional>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::autograd {

struct GradcheckOptions {
  double eps = 1e-6;   // central-difference step; f64 round-off ~1e-16/eps = 1e-10
  double atol = 1e-7;  // the step's truncation error is O(eps^2 * f''') ~ 1e-12 for smooth ops
  double rtol = 1e-5;
  uint64_t seed = 1234;  // for the output projection
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0.0;
  std::string message;  // names the input, element, analytic and numeric values on failure
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Inputs that should be checked must be f64 and require grad; others are passed through.
GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

}  // namespace tessera::autograd
