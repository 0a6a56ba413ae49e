#pragma once
// Reduction launchers: the CUDA side of Backend::reduce and max_backward
// (tessera/core/backend.h). x is contiguous [outer, r, inner]; out and indices (i64, max only)
// are [outer, inner]. Every result is deterministic: fixed reduction trees, no float atomics.

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

// sum and mean for every dtype; max (value and first argmax; NaN wins at its first position)
// for every dtype.
void reduce(ReduceOp op, const Tensor& x, const Tensor& out, const Tensor& indices,
            cudaStream_t stream);
// gx [outer, r, inner] = gy[o, i] where k == indices[o, i], zero elsewhere (every element of gx
// is written).
void max_backward(const Tensor& indices, const Tensor& gy, const Tensor& gx, cudaStream_t stream);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
