#pragma once
// The copy/cast launcher: the CUDA side of Backend::copy (tessera/core/backend.h).
// dst[i] = cast(src[i]) for one shape, any strides, any dtypes among f32 f64 bf16 f16 i32 i64,
// rounding as the CPU backend does (bf16/f16 round to nearest even, from float).

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

void copy(const Tensor& src, const Tensor& dst, cudaStream_t stream);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
