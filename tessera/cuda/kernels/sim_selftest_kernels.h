#pragma once
// Self-test kernels for the device header and the kernel simulator: small, realistic kernels
// that tests/cuda/ runs in the simulator against plain CPU loops, and that the nvcc check
// target (tessera/cuda/CMakeLists.txt) compiles for the GPU. Pointers are device pointers
// (in the simulator: host memory, guarded when it comes from sim::device_malloc).

#include <cstdint>

#include "tessera/core/half.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda::selftest {
inline namespace TESSERA_CUDA_ABI {

// partials[b] = sum of the x[i] that block b visits in a grid-stride loop: warp shuffles, then
// shared memory across warps. threads must be a multiple of 32.
void block_sum(const float* x, int64_t n, float* partials, int blocks, int threads,
               cudaStream_t stream = nullptr);

// c (m x n) = a (m x k) @ b (k x n), row-major f32, through 16x16 tiles in shared memory.
void tiled_matmul(const float* a, const float* b, float* c, int m, int n, int k,
                  cudaStream_t stream = nullptr);

// counts[v] += the number of i with values[i] == v, for 0 <= v < num_bins: a per-block
// histogram in dynamic shared memory (shared atomics), merged with global atomics.
void histogram(const int* values, int64_t n, unsigned* counts, int num_bins, int blocks,
               int threads, cudaStream_t stream = nullptr);

// Per warp of 32 consecutive elements: out[i] = inclusive prefix sum of x (__shfl_up_sync), and
// positive[i / 32] = the ballot of x > 0 (__ballot_sync).
void warp_scan(const int* x, int* out, unsigned* positive, int64_t n,
               cudaStream_t stream = nullptr);

// One warp: lane l loads a_frags[l][0..3], b_frags[l][0..2], c_frags[l][0..3], runs
// mma.m16n8k16 (f16 inputs when `f16`, else bf16) and stores d_frags[l][0..3].
void mma_fragments(const uint32_t* a_frags, const uint32_t* b_frags, const float* c_frags,
                   float* d_frags, bool f16, cudaStream_t stream = nullptr);

// c (m x n, f32) = a (m x k) @ b (k x n), bf16 row-major, one warp per 16x8 tile of c on tensor
// cores; m % 16 == 0, n % 8 == 0, k % 16 == 0.
void mma_matmul_bf16(const BFloat16* a, const BFloat16* b, float* c, int m, int n, int k,
                     cudaStream_t stream = nullptr);

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda::selftest
