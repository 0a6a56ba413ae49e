#pragma once
// The fused AdamW launcher (adamw.cu), with the contract of Backend::adamw_step
// (tessera/core/backend.h): in place on contiguous f32 param, m, v of one shape on the device,
// with an f32, bf16 or f16 grad, and optionally the updated param rounded into `rounded`
// (bf16/f16; stochastically for bf16 when args says so). The results are the CPU backend's bits
// (see adamw.cu).

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                const Tensor& rounded, const AdamWArgs& args, cudaStream_t stream);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
