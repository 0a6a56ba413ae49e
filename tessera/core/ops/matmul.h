#pragma once
// Batched matmul on the backend's GEMM (Eigen on the CPU, cuBLASLt on CUDA).
//
// a is [..., M, K] and b is [..., K, N] (or transposed, with the flags); leading batch dims
// broadcast. The front end folds batch dims into M where the layout allows, so
// [B, T, C] x [C, N] is one GEMM of (B*T) x C x N, and it passes transposed views straight
// through as transposed operands: no copies beyond what the layout needs.

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"

namespace tessera::ops {

// op(a) op(b) (+ bias over the last dim); op transposes the last two dims when its flag is set.
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false,
              const Tensor& bias = Tensor());
// gelu(op(a) op(b) (+ bias)) with the GELU in the GEMM's epilogue (Backend::matmul_gelu),
// and the pre-activation that the backward pass reads. Bit-identical to matmul then gelu on
// the CPU. A 16-bit dtype on the CPU runs the GEMM in f32 (as matmul does), rounds the
// pre-activation and applies gelu to it: the same two ops, in the same order. On a device the
// epilogue may take GELU of the unrounded f32 accumulator (see Backend::matmul_gelu).
struct MatmulGelu {
  Tensor out, pre;
};
MatmulGelu matmul_gelu(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false,
                       const Tensor& bias = Tensor());
// out = alpha * op(a) op(b) + beta * out, in place; out must already have the result shape.
void matmul_out(const Tensor& out, const Tensor& a, const Tensor& b, bool trans_a = false,
                bool trans_b = false, float alpha = 1.0f, float beta = 0.0f);

}  // namespace tessera::ops
