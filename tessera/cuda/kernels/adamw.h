#pragma once
// The fused AdamW launcher (adamw.cu), with the contract of Backend::adamw_step
// (tessera/core/backend.h): in place on contiguous f32 param, grad, m, v of one shape on the
// device. Each element follows the CPU backend's formula and rounding order (see adamw.cu).

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWArgs& args, cudaStream_t stream);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
