#pragma once
// The [B, heads, T, D] view the attention kernels (attention.cu, attention_mma.cu) index: a
// pointer and the batch, head and time strides; D has unit stride (the launchers check it).

#include <cstdint>

#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

template <class T>
struct Heads {
  T* data;
  int64_t sb, sh, st;
  __device__ __forceinline__ T* row(int64_t b, int64_t h, int64_t t) const {
    return data + b * sb + h * sh + t * st;
  }
};

// Host side: the view of a tensor of that layout.
template <class T>
Heads<T> heads(const Tensor& x) {
  return {static_cast<T*>(x.data_ptr()), x.stride(0), x.stride(1), x.stride(2)};
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
