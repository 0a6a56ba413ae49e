#pragma once
// The per-step scalars of the fused AdamW update, formed once on the host and shared by every
// backend's kernel (CPU and CUDA), so both apply the same rounded coefficients.
//
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p = p (1 - lr wd) - step_size m / (sqrt(v) / sqrt_bc2 + eps)

#include <cmath>

#include "tessera/core/backend.h"

namespace tessera {

struct AdamCoefficients {
  float decay;  // 1 - lr * weight_decay
  float b1, one_minus_b1, b2, one_minus_b2;
  float step_size;  // lr / (1 - beta1^t)
  float sqrt_bc2;   // sqrt(1 - beta2^t)
  float eps, grad_scale;
};

// Bias corrections in double: beta2^t for t in the hundreds of thousands underflows gracefully
// to 0 there, and 1 - beta^t keeps its digits for small t.
inline AdamCoefficients adamw_coefficients(const AdamWArgs& args) {
  const double t = double(args.step);
  const double bc1 = 1.0 - std::pow(double(args.beta1), t);
  const double bc2 = 1.0 - std::pow(double(args.beta2), t);
  AdamCoefficients c;
  c.decay = float(1.0 - double(args.lr) * double(args.weight_decay));
  c.b1 = args.beta1;
  c.one_minus_b1 = float(1.0 - double(args.beta1));
  c.b2 = args.beta2;
  c.one_minus_b2 = float(1.0 - double(args.beta2));
  c.step_size = float(double(args.lr) / bc1);
  c.sqrt_bc2 = float(std::sqrt(bc2));
  c.eps = args.eps;
  c.grad_scale = args.grad_scale;
  return c;
}

}  // namespace tessera
