// Weight-only INT8 linear (llama.cpp's Q8_0 blocks): one block of 128 threads per output row n.
// Thread t takes the weight row's 32-element blocks t, t + 128, ...: it reads the block's eight
// int32 words (32 int8) and its f16 scale once and dots them with the same 32 inputs of up to
// kRowsPerPass rows of x, keeping one partial sum per row; the block then reduces each row's
// partials in a fixed tree. Rows of x past kRowsPerPass take further passes over the weight.
// Within a 32-block the products are summed in k order, in the compute type, the CPU's order
// up to its 8-lane split: the two agree to f32 round-off, and each is the same on every run.
//
// Bound: memory while M is small (decode). A pass reads the row's K bytes of q and K/16 bytes of
// scales, 34/32 bytes per weight against 4 in f32 (3.76x fewer), plus x (cached across rows).

#include "tessera/cuda/kernels/linear_q8.h"

#include <type_traits>

#include "tessera/cuda/kernels/row_partials.h"
#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kThreads = 128;
constexpr int kRowsPerPass = 8;
constexpr int kBlock = 32;

template <class T>
__global__ void linear_q8_kernel(const T* __restrict__ x, const int32_t* __restrict__ q8,
                                 const __half* __restrict__ scale, const T* __restrict__ bias,
                                 T* __restrict__ out, int64_t M, int64_t K, int64_t N) {
  using A = acc_t<T>;
  TESSERA_SHARED(A, partial, kThreads * kRowsPerPass);
  const int64_t n = blockIdx.x;
  const int t = threadIdx.x;
  const int64_t blocks = K / kBlock;
  const int32_t* qrow = q8 + n * (K / 4);
  for (int64_t m0 = 0; m0 < M; m0 += kRowsPerPass) {
    const int64_t rows = M - m0 < kRowsPerPass ? M - m0 : kRowsPerPass;
    A acc[kRowsPerPass];
    for (int r = 0; r < kRowsPerPass; ++r) acc[r] = 0;
    for (int64_t b = t; b < blocks; b += kThreads) {
      const A d = A(load_acc(scale + n * blocks + b));
      A w[kBlock];
      for (int i = 0; i < kBlock / 4; ++i) {
        const int32_t word = qrow[b * (kBlock / 4) + i];
        for (int j = 0; j < 4; ++j) w[4 * i + j] = d * A(int8_t((word >> (8 * j)) & 0xff));
      }
      for (int r = 0; r < kRowsPerPass; ++r) {
        if (r >= rows) break;
        const T* xr = x + (m0 + r) * K + b * kBlock;
        A dot = 0;
        for (int i = 0; i < kBlock; ++i) dot += w[i] * load_acc(xr + i);
        acc[r] += dot;
      }
    }
    reduce_row_partials<kThreads>(acc, partial);
    if (t < rows) {
      const A y = partial[t * kThreads] + (bias != nullptr ? load_acc(bias + n) : A(0));
      out[(m0 + t) * N + n] = convert<T>(y);
    }
    __syncthreads();  // partial is rewritten by the next pass
  }
}

}  // namespace

void linear_q8(const Tensor& x, const Tensor& q8, const Tensor& scale, const Tensor& bias,
               const Tensor& out, cudaStream_t stream) {
  const char* op = "linear_q8";
  const int64_t M = x.dim() == 2 ? x.size(0) : -1, K = x.dim() == 2 ? x.size(1) : -1;
  TESSERA_CHECK(
      x.dim() == 2 && is_floating(x.dtype()) && x.is_contiguous() && K % kBlock == 0 &&
          q8.dim() == 2 && q8.dtype() == DType::i32 && q8.is_contiguous() && q8.size(1) * 4 == K &&
          scale.dtype() == DType::f16 && scale.is_contiguous() &&
          scale.numel() * kBlock == q8.size(0) * K && out.dtype() == x.dtype() &&
          out.is_contiguous() && out.shape() == Shape({M, q8.size(0)}) &&
          (!bias.defined() ||
           (bias.dtype() == x.dtype() && bias.is_contiguous() && bias.numel() == q8.size(0))),
      "cuda ", op,
      ": needs x [M, K] contiguous floating with K % 32 == 0, q8 i32 [N, K/4], scale "
      "f16 [N, K/32], bias [N] of x's dtype or none, out [M, N] like x; got x ",
      x.describe(), ", q8 ", q8.describe(), ", scale ", scale.describe(), ", out ", out.describe());
  const int64_t N = q8.size(0);
  if (M * N == 0) return;
  dispatch_device(x.dtype(), [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!std::is_integral_v<S>) {
      launch(linear_q8_kernel<S>, LaunchConfig{dim3(unsigned(N)), dim3(kThreads), 0, stream, op},
             static_cast<const S*>(x.data_ptr(op)), static_cast<const int32_t*>(q8.data_ptr(op)),
             static_cast<const __half*>(scale.data_ptr(op)),
             bias.defined() ? static_cast<const S*>(bias.data_ptr(op)) : nullptr,
             static_cast<S*>(out.data_ptr(op)), M, K, N);
    }
  });
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
