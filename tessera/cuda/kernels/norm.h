#pragma once
// LayerNorm and RMSNorm launchers (norm.cu), with the contracts of the Backend methods of the
// same names (tessera/core/backend.h): normalization over the last dim of contiguous
// [rows, n] tensors on the device; weight, bias, gw, gb are [n] in x's dtype (f32, bf16, f16 or
// f64); mean and rstd are [rows] in f32 (f64 for f64 x). Undefined bias / gw / gb are skipped.

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                       const Tensor& y, const Tensor& mean, const Tensor& rstd,
                       cudaStream_t stream);
void layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& gy, const Tensor& gx, const Tensor& gw,
                        const Tensor& gb, cudaStream_t stream);
void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                     const Tensor& rstd, cudaStream_t stream);
void rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& gy,
                      const Tensor& gx, const Tensor& gw, cudaStream_t stream);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
