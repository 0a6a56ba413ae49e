// Self-test kernels (sim_selftest_kernels.h). Each is the textbook form of a pattern the real
// kernels use: block reduction, shared-memory tiling, shared atomics, warp scan, tensor-core
// fragments. All are memory-bound at these sizes except the matmuls (compute-bound per tile);
// they exist for correctness, not speed.

#include "tessera/cuda/kernels/sim_selftest_kernels.h"

namespace tessera::cuda::selftest {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kTile = 16;

// Butterfly sum over the 32 lanes: every lane ends with the warp's total.
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// The block's total in thread 0: warps reduce with shuffles, warp leaders meet in `scratch`
// (one float per warp), warp 0 reduces those.
__device__ float block_total(float v, SharedPtr<float> scratch) {
  const unsigned lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const unsigned num_warps = (blockDim.x + warpSize - 1) / warpSize;
  float total = 0.0f;
  if (warp == 0) {
    total = lane < num_warps ? float(scratch[lane]) : 0.0f;
    total = warp_sum(total);
  }
  return total;
}

__global__ void block_sum_kernel(const float* __restrict__ x, int64_t n,
                                 float* __restrict__ partials) {
  TESSERA_SHARED(float, warp_sums, 32);
  float acc = 0.0f;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) acc += x[i];
  const float total = block_total(acc, warp_sums);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void tiled_matmul_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                    float* __restrict__ c, int m, int n, int k) {
  TESSERA_SHARED(float, a_tile, kTile * kTile);
  TESSERA_SHARED(float, b_tile, kTile * kTile);
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  const int row = int(blockIdx.y) * kTile + ty, col = int(blockIdx.x) * kTile + tx;
  float acc = 0.0f;
  for (int k0 = 0; k0 < k; k0 += kTile) {
    a_tile[ty * kTile + tx] = row < m && k0 + tx < k ? a[int64_t(row) * k + k0 + tx] : 0.0f;
    b_tile[ty * kTile + tx] = k0 + ty < k && col < n ? b[int64_t(k0 + ty) * n + col] : 0.0f;
    __syncthreads();
    for (int kk = 0; kk < kTile; ++kk) acc += a_tile[ty * kTile + kk] * b_tile[kk * kTile + tx];
    __syncthreads();
  }
  if (row < m && col < n) c[int64_t(row) * n + col] = acc;
}

__global__ void histogram_kernel(const int* __restrict__ values, int64_t n,
                                 unsigned* __restrict__ counts, int num_bins) {
  TESSERA_DYNAMIC_SHARED(unsigned, bins);
  for (int bin = int(threadIdx.x); bin < num_bins; bin += int(blockDim.x)) bins[bin] = 0u;
  __syncthreads();
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int v = values[i];
    if (v >= 0 && v < num_bins) atomicAdd(&bins[v], 1u);
  }
  __syncthreads();
  for (int bin = int(threadIdx.x); bin < num_bins; bin += int(blockDim.x)) {
    const unsigned count = bins[bin];
    if (count != 0u) atomicAdd(&counts[bin], count);
  }
}

__global__ void warp_scan_kernel(const int* __restrict__ x, int* __restrict__ out,
                                 unsigned* __restrict__ positive, int64_t n) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int lane = int(threadIdx.x) % warpSize;
  const int value = i < n ? x[i] : 0;
  int sum = value;
  for (int offset = 1; offset < warpSize; offset *= 2) {
    const int up = __shfl_up_sync(kFullMask, sum, unsigned(offset));
    if (lane >= offset) sum += up;
  }
  const unsigned ballot = __ballot_sync(kFullMask, value > 0);
  if (i < n) out[i] = sum;
  if (lane == 0 && i < n) positive[i / 32] = ballot;
}

__global__ void mma_fragments_kernel(const uint32_t* __restrict__ a_frags,
                                     const uint32_t* __restrict__ b_frags,
                                     const float* __restrict__ c_frags, float* __restrict__ d_frags,
                                     int f16) {
  const int lane = int(threadIdx.x);
  uint32_t a[4], b[2];
  float c[4], d[4];
  for (int i = 0; i < 4; ++i) a[i] = a_frags[lane * 4 + i];
  for (int i = 0; i < 2; ++i) b[i] = b_frags[lane * 2 + i];
  for (int i = 0; i < 4; ++i) c[i] = c_frags[lane * 4 + i];
  if (f16) {
    mma_m16n8k16_f16(d, a, b, c);
  } else {
    mma_m16n8k16_bf16(d, a, b, c);
  }
  for (int i = 0; i < 4; ++i) d_frags[lane * 4 + i] = d[i];
}

__global__ void mma_matmul_bf16_kernel(const __nv_bfloat16* __restrict__ a,
                                       const __nv_bfloat16* __restrict__ b, float* __restrict__ c,
                                       int m, int n, int k) {
  using L = MmaLayout;
  const int lane = int(threadIdx.x) % warpSize;
  const int warp = int((blockIdx.x * blockDim.x + threadIdx.x) / warpSize);
  const int tile_m = warp / (n / 8), tile_n = warp % (n / 8);
  if (tile_m * 16 >= m) return;  // the whole warp leaves together
  const __nv_bfloat16* a_rows = a + int64_t(tile_m) * 16 * k;
  const __nv_bfloat16* b_cols = b + tile_n * 8;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < k; k0 += 16) {
    uint32_t af[4], bf[2];
    for (int r = 0; r < 4; ++r) {
      const int i = 2 * r;
      af[r] = pack_bf16x2(a_rows[int64_t(L::a_row(lane, i)) * k + k0 + L::a_col(lane, i)],
                          a_rows[int64_t(L::a_row(lane, i + 1)) * k + k0 + L::a_col(lane, i + 1)]);
    }
    for (int r = 0; r < 2; ++r) {
      const int i = 2 * r;
      bf[r] = pack_bf16x2(b_cols[int64_t(k0 + L::b_row(lane, i)) * n + L::b_col(lane, i)],
                          b_cols[int64_t(k0 + L::b_row(lane, i + 1)) * n + L::b_col(lane, i + 1)]);
    }
    float d[4];
    mma_m16n8k16_bf16(d, af, bf, acc);
    for (int i = 0; i < 4; ++i) acc[i] = d[i];
  }
  for (int i = 0; i < 4; ++i)
    c[int64_t(tile_m * 16 + L::c_row(lane, i)) * n + tile_n * 8 + L::c_col(lane, i)] = acc[i];
}

}  // namespace

void block_sum(const float* x, int64_t n, float* partials, int blocks, int threads,
               cudaStream_t stream) {
  TESSERA_CHECK(threads > 0 && threads % 32 == 0, "block_sum: threads per block must be a "
                "positive multiple of 32 (whole warps), got ", threads);
  launch(block_sum_kernel, LaunchConfig{dim3(unsigned(blocks)), dim3(unsigned(threads)), 0,
                                        stream, "block_sum"},
         x, n, partials);
}

void tiled_matmul(const float* a, const float* b, float* c, int m, int n, int k,
                  cudaStream_t stream) {
  const dim3 grid(unsigned((n + kTile - 1) / kTile), unsigned((m + kTile - 1) / kTile));
  launch(tiled_matmul_kernel, LaunchConfig{grid, dim3(kTile, kTile), 0, stream, "tiled_matmul"},
         a, b, c, m, n, k);
}

void histogram(const int* values, int64_t n, unsigned* counts, int num_bins, int blocks,
               int threads, cudaStream_t stream) {
  launch(histogram_kernel,
         LaunchConfig{dim3(unsigned(blocks)), dim3(unsigned(threads)),
                      size_t(num_bins) * sizeof(unsigned), stream, "histogram"},
         values, n, counts, num_bins);
}

void warp_scan(const int* x, int* out, unsigned* positive, int64_t n, cudaStream_t stream) {
  constexpr int kThreads = 128;
  const auto blocks = unsigned((n + kThreads - 1) / kThreads);
  launch(warp_scan_kernel, LaunchConfig{dim3(blocks), dim3(kThreads), 0, stream, "warp_scan"}, x,
         out, positive, n);
}

void mma_fragments(const uint32_t* a_frags, const uint32_t* b_frags, const float* c_frags,
                   float* d_frags, bool f16, cudaStream_t stream) {
  launch(mma_fragments_kernel, LaunchConfig{dim3(1), dim3(32), 0, stream, "mma_fragments"},
         a_frags, b_frags, c_frags, d_frags, int(f16));
}

void mma_matmul_bf16(const BFloat16* a, const BFloat16* b, float* c, int m, int n, int k,
                     cudaStream_t stream) {
  TESSERA_CHECK(m > 0 && n > 0 && k > 0 && m % 16 == 0 && n % 8 == 0 && k % 16 == 0,
                "mma_matmul_bf16: needs m % 16 == 0, n % 8 == 0, k % 16 == 0, got m=", m,
                " n=", n, " k=", k);
  constexpr int kWarpsPerBlock = 4;
  const int tiles = (m / 16) * (n / 8);
  const auto blocks = unsigned((tiles + kWarpsPerBlock - 1) / kWarpsPerBlock);
  launch(mma_matmul_bf16_kernel,
         LaunchConfig{dim3(blocks), dim3(32 * kWarpsPerBlock), 0, stream, "mma_matmul_bf16"},
         reinterpret_cast<const __nv_bfloat16*>(a), reinterpret_cast<const __nv_bfloat16*>(b), c,
         m, n, k);
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda::selftest
