#pragma once
// Backend::matmul and matmul_gelu on the device, one declaration with two builds: gemm_gpu.cu
// (cuBLASLt, its GELU_AUX epilogue for matmul_gelu) and gemm_sim.cpp (the SIMT kernel in
// kernels/gemm_simt.cu, with the epilogue in its output pass, for the simulator only).

#include "tessera/core/backend.h"
#include "tessera/cuda/backend/device_context.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

void gemm(DeviceContext& context, const Tensor& a, const Tensor& b, const Tensor& bias,
          const Tensor& out, const MatmulArgs& args);
// Backend::matmul_gelu: pre = op(a) op(b) (+ bias), out = gelu(pre).
void gemm_gelu(DeviceContext& context, const Tensor& a, const Tensor& b, const Tensor& bias,
               const Tensor& pre, const Tensor& out, const MatmulArgs& args);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
