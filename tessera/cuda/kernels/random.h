#pragma once
// Random-tensor launchers: the CUDA side of Backend::random_uniform and random_normal
// (tessera/core/backend.h). dst is contiguous and floating; element i draws from Philox stream
// position offset + i of `seed`, so the values are bit-identical to the CPU backend's.

#include <cstdint>

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

void random_uniform(const Tensor& dst, double lo, double hi, uint64_t seed, uint64_t offset,
                    cudaStream_t stream);
void random_normal(const Tensor& dst, double mean, double stddev, uint64_t seed, uint64_t offset,
                   cudaStream_t stream);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
