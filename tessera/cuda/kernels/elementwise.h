#pragma once
// Elementwise launchers: the CUDA side of Backend::unary, unary_backward, binary and where
// (tessera/core/backend.h). Inputs are views of out's shape with any strides (0 where
// broadcast) and out's dtype; out may be an input (in place) and may itself be strided.
// f32, f64, bf16, f16 everywhere; i32 and i64 for binary, where, and unary neg/relu.

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

void unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar, cudaStream_t stream);
// y may be undefined for ops whose derivative does not read it (all but exp, tanh, sqrt,
// rsqrt).
void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy,
                    const Tensor& gx, double scalar, cudaStream_t stream);
void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out, cudaStream_t stream);
// out = cond != 0 ? a : b; cond may have any dtype.
void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out,
           cudaStream_t stream);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
