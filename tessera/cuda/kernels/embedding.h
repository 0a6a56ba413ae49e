#pragma once
// Embedding launchers: the CUDA side of Backend::embedding_forward and embedding_backward
// (tessera/core/backend.h). weight / gweight are contiguous [V, C], ids contiguous i32/i64 [N],
// out / gy contiguous [N, C]; f32, f64, bf16, f16.
//
// Both throw, like the CPU backend, naming the first flat position whose id lies outside
// [0, V): checking reads a flag back from the device, so each call synchronises its stream.
// The kernels never read or write out of bounds for such ids either way.

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

void embedding_forward(const Tensor& weight, const Tensor& ids, const Tensor& out,
                       cudaStream_t stream);
// gweight (zeroed by the caller) += the gy rows of each id, summed in position order: the same
// order as the CPU backend, so the bits match it, and no atomics.
void embedding_backward(const Tensor& ids, const Tensor& gy, const Tensor& gweight,
                        cudaStream_t stream);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
