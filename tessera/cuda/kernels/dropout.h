#pragma once
// The dropout launcher: the CUDA side of Backend::dropout (tessera/core/backend.h).
// out = keep ? x / (1 - p) : 0 over contiguous x and out (f32, f64, bf16, f16), keep decided by
// Philox stream position offset + i of `seed`: the mask is bit-identical to the CPU backend's,
// and applying it to gy with the same key is the backward pass.

#include <cstdint>

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

void dropout(const Tensor& x, const Tensor& out, double p, uint64_t seed, uint64_t offset,
             cudaStream_t stream);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
