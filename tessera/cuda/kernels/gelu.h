#pragma once
// The tanh form of GELU, UnaryOp::gelu, shared by the elementwise kernels and the SIMT GEMM's
// epilogue so that the fused and unfused paths round alike (the CPU backend's
// cpu_elementwise.cpp spells the same expression in the same order).

#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

constexpr double kGeluSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluCoeff = 0.044715;

// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) in the compute type A.
template <class A>
__device__ __forceinline__ A gelu_tanh(A x) {
  const A u = A(kGeluSqrt2OverPi) * (x + A(kGeluCoeff) * x * x * x);
  return A(0.5) * x * (A(1) + math_tanh(u));
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
