#pragma once
// Differentiable matmul and linear.

#include "tessera/core/tensor.h"

namespace tessera {

// op(a) op(b) (+ bias); see core/ops/matmul.h for shapes and batching.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false,
              const Tensor& bias = Tensor());
// x [..., in] times weight [out, in] transposed, plus bias [out]: torch.nn.functional.linear.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// linear's argument checks (x and weight defined, weight [out, in], x [..., in]), naming `op`;
// shared with linear_gelu.
void check_linear_args(const char* op, const Tensor& x, const Tensor& weight);

}  // namespace tessera
