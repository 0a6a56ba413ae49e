#pragma once
// Creation kernels: Backend::fill and Backend::arange on the GPU (contracts in core/backend.h).

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

// dst[i] = value converted to dst's dtype (any dtype, any strides).
void fill(const Tensor& dst, double value, cudaStream_t stream);
// dst[i] = start + i * step, computed in f64 and converted to dst's dtype; dst contiguous 1-d.
void arange(const Tensor& dst, double start, double step, cudaStream_t stream);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
