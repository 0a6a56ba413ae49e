#pragma once
// The global squared norm launcher: the CUDA side of Backend::squared_norm
// (tessera/core/backend.h), used for gradient clipping and the loss-scale overflow check.

#include <vector>

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

// out (f32 0-d) = sum over xs (contiguous, floating) of sum(x^2), accumulated in f64 with a
// partition that depends only on the sizes, so the result is bit-identical from run to run.
void squared_norm(const std::vector<Tensor>& xs, const Tensor& out, cudaStream_t stream);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
