#pragma once
// Differentiable linear + GELU with the GELU in the GEMM's epilogue (the MLP's c_fc).

#include "tessera/core/tensor.h"

namespace tessera {

// gelu(linear(x, weight, bias)) in one GEMM pass (ops::matmul_gelu): x [..., in], weight
// [out, in], bias [out] or undefined. Forward and gradients are bit-identical to the two ops
// on the CPU; the backward pass reads the saved pre-activation instead of recomputing it.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace tessera
