#pragma once
// Differentiable matmul and linear.

#include "tessera/core/tensor.h"

namespace tessera {

// op(a) op(b) (+ bias); see core/ops/matmul.h for shapes and batching.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false,
              const Tensor& bias = Tensor());
// x [..., in] times weight [out, in] transposed, plus bias [out]: torch.nn.functional.linear.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace tessera
