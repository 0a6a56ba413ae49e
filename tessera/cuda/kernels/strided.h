#pragma once
// Strided index math for kernels over N operands that share one shape but have their own
// element strides (0 where broadcast). The host coalesces dims first, as the CPU's
// StridedLoop does (size-1 dims dropped, neighbours whose strides chain merged), so a
// contiguous operand set becomes one flat dim and a broadcast bias becomes [rows, cols]; the
// kernel then turns a linear element index into one offset per operand. The index type is a
// template parameter: 32-bit division is several times cheaper than 64-bit, and launchers use
// it whenever the element count fits.

#include <cstdint>

#include "tessera/core/shape.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

template <int N>
struct StridedOffsets {
  int ndim = 0;
  int64_t sizes[DimVector::kMaxDims] = {};
  int64_t strides[N][DimVector::kMaxDims] = {};

  // Element offsets of linear (row-major) index `linear` for each operand.
  template <class Index>
  __device__ __forceinline__ void offsets(Index linear, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      const Index size = Index(sizes[d]);
      const Index i = linear % size;
      linear /= size;
      for (int k = 0; k < N; ++k) off[k] += int64_t(i) * strides[k][d];
    }
  }

  // True when every operand is one flat run with unit stride.
  bool all_contiguous() const {
    if (ndim != 1) return false;
    for (int k = 0; k < N; ++k)
      if (strides[k][0] != 1) return false;
    return true;
  }
};

// Coalesced offsets of `shape` under each operand's strides (at least 1-d).
template <int N>
StridedOffsets<N> make_strided(const Shape& shape, const Strides* const (&strides)[N]) {
  StridedOffsets<N> s;
  for (int d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    const int last = s.ndim - 1;
    bool merge = last >= 0;
    for (int k = 0; k < N && merge; ++k) merge = s.strides[k][last] == (*strides[k])[d] * shape[d];
    if (merge) {
      s.sizes[last] *= shape[d];
      for (int k = 0; k < N; ++k) s.strides[k][last] = (*strides[k])[d];
    } else {
      s.sizes[s.ndim] = shape[d];
      for (int k = 0; k < N; ++k) s.strides[k][s.ndim] = (*strides[k])[d];
      ++s.ndim;
    }
  }
  if (s.ndim == 0) {
    s.ndim = 1;
    s.sizes[0] = 1;
    for (int k = 0; k < N; ++k) s.strides[k][0] = 1;
  }
  return s;
}

// Whether 32-bit index math covers n elements.
inline bool fits_int32(int64_t n) {
  return n < (int64_t(1) << 31);
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
