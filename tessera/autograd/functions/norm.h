#pragma once
// Differentiable LayerNorm and RMSNorm over the last dim (fused backward kernels).

#include "tessera/core/tensor.h"

namespace tessera {

// weight, bias: [C]; bias may be undefined.
Tensor layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
Tensor rmsnorm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

}  // namespace tessera
