#pragma once
// Softmax launchers: the CUDA side of Backend::softmax and softmax_backward
// (tessera/core/backend.h), row-wise over the last dim of contiguous [rows, n]; `log` selects
// log-softmax. f32, f64, bf16, f16.

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

void softmax(const Tensor& x, const Tensor& out, bool log, cudaStream_t stream);
// gx = y * (gy - sum(gy * y)) for softmax, gy - exp(y) * sum(gy) for log-softmax (y is the
// forward output).
void softmax_backward(const Tensor& y, const Tensor& gy, const Tensor& gx, bool log,
                      cudaStream_t stream);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
