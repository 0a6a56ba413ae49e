#pragma once
// The reduction the INT8 linear kernels (linear_q8.cu, linear_w8a8.cu) end each pass with: a
// block of kThreads threads, each holding one partial sum for each of R rows of x, sums every
// row's partials in a fixed tree in shared memory (no atomics, the same order on every run).

#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

// Every thread must call it. Afterwards partial[r * kThreads] holds row r's total; partial
// may be rewritten only after a further __syncthreads().
template <int kThreads, int R, class A>
__device__ void reduce_row_partials(const A (&acc)[R], SharedPtr<A> partial) {
  const int t = threadIdx.x;
  for (int r = 0; r < R; ++r) partial[r * kThreads + t] = acc[r];
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half)
      for (int r = 0; r < R; ++r) partial[r * kThreads + t] += partial[r * kThreads + t + half];
    __syncthreads();
  }
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
