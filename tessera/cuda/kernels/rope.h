#pragma once
// The rotary-embedding launcher: the CUDA side of Backend::rope (tessera/core/backend.h).
// x and out are [B, T, H, D] with any strides and unit stride in D (out may be x); the halves
// (d, d + D/2) rotate by angle (pos_offset + t) * theta^(-2d/D), the other way when `inverse`
// (the backward pass). D must be even. f32, f64, bf16, f16.

#include <cstdint>

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

void rope(const Tensor& x, const Tensor& out, int64_t pos_offset, double theta, bool inverse,
          cudaStream_t stream);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
