// W8A8: rows of x to int8 with one scale each (quantize_rows_q8), then their integer product
// with a Q8_0 weight (linear_w8a8). Contracts in tessera/core/op_table.def.
//
// quantize_rows_q8: one block of 128 threads per row. A block-wide max of |x| (in f32), then
// each thread packs its words of four int8, rounding x / s half to even (__float2int_rn, the
// CPU's nearbyint) with the CPU's f32 division, so both devices store the same bytes.
// linear_w8a8: one block of 128 threads per output row n, as linear_q8. Thread t takes the
// weight row's 32-blocks t, t + 128, ...: eight dp4a over the block's words give its exact
// int32 dot with a row of x, then one FMA by the block's scale into that row's partial; the
// block reduces each row's partials in a fixed tree and scales by the row's s. Up to
// kRowsPerPass rows of x per pass over the weight row.
//
// Bound: memory while M is small: 34 bytes per 32 weights, as linear_q8, and x read as int8
// (a quarter of f32). Past a few rows, dp4a does four multiply-adds per instruction where
// linear_q8 converts and multiplies each weight.

#include <cstdint>
#include <type_traits>

#include "tessera/cuda/device.h"
#include "tessera/cuda/kernels/launchers.h"
#include "tessera/cuda/kernels/row_partials.h"
#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kThreads = 128;
constexpr int kRowsPerPass = 8;
constexpr int kBlock = 32;
constexpr int kWords = kBlock / 4;

template <class T>
__global__ void quantize_rows_q8_kernel(const T* __restrict__ x, int32_t* __restrict__ xq,
                                        float* __restrict__ xscale, int64_t K) {
  TESSERA_SHARED(float, scratch, 32);
  const int64_t m = blockIdx.x;
  const T* row = x + m * K;
  float amax = 0;
  for (int64_t k = threadIdx.x; k < K; k += kThreads) {
    const float v = float(load_acc(row + k));
    amax = fmaxf(amax, v < 0 ? -v : v);
  }
  amax = block_max(amax, scratch);
  const float d = amax / 127.0f;
  if (threadIdx.x == 0) xscale[m] = d;
  for (int64_t w = threadIdx.x; w < K / 4; w += kThreads) {
    unsigned word = 0;
    for (int j = 0; j < 4; ++j) {
      int q = d == 0 ? 0 : __float2int_rn(float(load_acc(row + 4 * w + j)) / d);
      q = q < -127 ? -127 : (q > 127 ? 127 : q);
      word |= (unsigned(q) & 0xffu) << (8 * j);
    }
    xq[m * (K / 4) + w] = int32_t(word);
  }
}

template <class T>
__global__ void linear_w8a8_kernel(const int32_t* __restrict__ xq, const float* __restrict__ xscale,
                                   const int32_t* __restrict__ q8, const __half* __restrict__ scale,
                                   const T* __restrict__ bias, T* __restrict__ out, int64_t M,
                                   int64_t K, int64_t N) {
  TESSERA_SHARED(float, partial, kThreads* kRowsPerPass);
  const int64_t n = blockIdx.x;
  const int t = threadIdx.x;
  const int64_t blocks = K / kBlock, words = K / 4;
  const int32_t* qrow = q8 + n * words;
  for (int64_t m0 = 0; m0 < M; m0 += kRowsPerPass) {
    const int64_t rows = M - m0 < kRowsPerPass ? M - m0 : kRowsPerPass;
    float acc[kRowsPerPass];
    for (int r = 0; r < kRowsPerPass; ++r) acc[r] = 0;
    for (int64_t b = t; b < blocks; b += kThreads) {
      const float d = float(load_acc(scale + n * blocks + b));
      int32_t w[kWords];
      for (int i = 0; i < kWords; ++i) w[i] = qrow[b * kWords + i];
      for (int r = 0; r < kRowsPerPass; ++r) {
        if (r >= rows) break;
        const int32_t* xr = xq + (m0 + r) * words + b * kWords;
        int dot = 0;
        for (int i = 0; i < kWords; ++i) dot = __dp4a(w[i], xr[i], dot);
        acc[r] = __fmaf_rn(float(dot), d, acc[r]);
      }
    }
    reduce_row_partials<kThreads>(acc, partial);
    if (t < rows) {
      const float b = bias != nullptr ? float(load_acc(bias + n)) : 0.0f;
      out[(m0 + t) * N + n] = convert<T>(__fmaf_rn(xscale[m0 + t], partial[t * kThreads], b));
    }
    __syncthreads();  // partial is rewritten by the next pass
  }
}

}  // namespace

void quantize_rows_q8(const Tensor& x, const Tensor& xq, const Tensor& xscale,
                      cudaStream_t stream) {
  const char* op = "quantize_rows_q8";
  const int64_t M = x.dim() == 2 ? x.size(0) : -1, K = x.dim() == 2 ? x.size(1) : -1;
  TESSERA_CHECK(x.dim() == 2 && is_floating(x.dtype()) && x.is_contiguous() && K % kBlock == 0 &&
                    xq.dtype() == DType::i32 && xq.is_contiguous() &&
                    xq.shape() == Shape({M, K / 4}) && xscale.dtype() == DType::f32 &&
                    xscale.is_contiguous() && xscale.shape() == Shape({M}),
                "cuda ", op,
                ": needs x [M, K] contiguous floating with K % 32 == 0, xq i32 [M, K/4] and "
                "xscale f32 [M]; got x ",
                x.describe(), ", xq ", xq.describe(), ", xscale ", xscale.describe());
  if (M * K == 0) return;
  dispatch_device(x.dtype(), [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!std::is_integral_v<S>) {
      launch(quantize_rows_q8_kernel<S>,
             LaunchConfig{dim3(unsigned(M)), dim3(kThreads), 0, stream, op},
             static_cast<const S*>(x.data_ptr(op)), static_cast<int32_t*>(xq.data_ptr(op)),
             static_cast<float*>(xscale.data_ptr(op)), K);
    }
  });
}

void linear_w8a8(const Tensor& xq, const Tensor& xscale, const Tensor& q8, const Tensor& scale,
                 const Tensor& bias, const Tensor& out, cudaStream_t stream) {
  const char* op = "linear_w8a8";
  const int64_t M = xq.dim() == 2 ? xq.size(0) : -1, K = xq.dim() == 2 ? xq.size(1) * 4 : -1;
  TESSERA_CHECK(
      xq.dim() == 2 && xq.dtype() == DType::i32 && xq.is_contiguous() && K % kBlock == 0 &&
          xscale.dtype() == DType::f32 && xscale.shape() == Shape({M}) && xscale.is_contiguous() &&
          q8.dim() == 2 && q8.dtype() == DType::i32 && q8.is_contiguous() && q8.size(1) * 4 == K &&
          scale.dtype() == DType::f16 && scale.is_contiguous() &&
          scale.numel() * kBlock == q8.size(0) * K && is_floating(out.dtype()) &&
          out.is_contiguous() && out.shape() == Shape({M, q8.size(0)}) &&
          (!bias.defined() ||
           (bias.dtype() == out.dtype() && bias.is_contiguous() && bias.numel() == q8.size(0))),
      "cuda ", op,
      ": needs xq i32 [M, K/4] with K % 32 == 0, xscale f32 [M], q8 i32 [N, K/4], scale f16 "
      "[N, K/32], bias [N] of out's dtype or none, out [M, N] contiguous floating; got xq ",
      xq.describe(), ", xscale ", xscale.describe(), ", q8 ", q8.describe(), ", scale ",
      scale.describe(), ", out ", out.describe());
  const int64_t N = q8.size(0);
  if (M * N == 0) return;
  dispatch_device(out.dtype(), [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!std::is_integral_v<S>) {
      launch(linear_w8a8_kernel<S>, LaunchConfig{dim3(unsigned(N)), dim3(kThreads), 0, stream, op},
             static_cast<const int32_t*>(xq.data_ptr(op)),
             static_cast<const float*>(xscale.data_ptr(op)),
             static_cast<const int32_t*>(q8.data_ptr(op)),
             static_cast<const __half*>(scale.data_ptr(op)),
             bias.defined() ? static_cast<const S*>(bias.data_ptr(op)) : nullptr,
             static_cast<S*>(out.data_ptr(op)), M, K, N);
    }
  });
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
