// The global squared norm over a list of tensors (every gradient of a model): memory-bound, one
// read of each tensor. Per tensor, a number of blocks that depends only on its size walks it in
// 16-byte vectors (a scalar tail and a scalar path for unaligned starts), squares in f64 and
// writes one partial per block; one block then sums all partials in a fixed order. No float
// atomics, so the bits do not change from run to run, and f64 accumulation keeps the norm of a
// 124M-parameter model exact to f32 rounding.

#include "tessera/cuda/kernels/squared_norm.h"

#include <algorithm>
#include <type_traits>

#include "tessera/cuda/kernels/scratch.h"
#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kNormVecsPerBlock = 2048;  // 16-byte vectors per block
constexpr int64_t kNormMaxBlocks = 1024;

template <class T>
__global__ void squares_kernel(const T* __restrict__ x, int64_t n, bool vec,
                               double* __restrict__ partials) {
  TESSERA_SHARED(double, scratch, 32);
  constexpr int W = kVecWidth<T>;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  double acc = 0.0;
  int64_t scalar_from = 0;
  if (vec) {
    const int64_t n_vec = n / W;
    for (int64_t v = tid; v < n_vec; v += stride) {
      acc_t<T> a[W];
      load_vec(x + v * W, a);
      for (int j = 0; j < W; ++j) acc += double(a[j]) * double(a[j]);
    }
    scalar_from = n_vec * W;
  }
  for (int64_t e = scalar_from + tid; e < n; e += stride) {
    const double a = double(load_acc(x + e));
    acc += a * a;
  }
  const double total = block_sum(acc, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void sum_partials_kernel(const double* __restrict__ partials, int64_t count,
                                    float* __restrict__ out) {
  TESSERA_SHARED(double, scratch, 32);
  double acc = 0.0;
  for (int64_t k = threadIdx.x; k < count; k += blockDim.x) acc += partials[k];
  const double total = block_sum(acc, scratch);
  if (threadIdx.x == 0) *out = float(total);
}

}  // namespace

void squared_norm(const std::vector<Tensor>& xs, const Tensor& out, cudaStream_t stream) {
  TESSERA_CHECK(out.dtype() == DType::f32 && out.numel() == 1,
                "cuda squared_norm: out must be "
                "an f32 scalar, got ",
                out.describe());
  // Blocks per tensor: a function of its size only, so the partition (hence the bits) is fixed.
  std::vector<int64_t> blocks(xs.size());
  int64_t total_blocks = 0;
  for (size_t t = 0; t < xs.size(); ++t) {
    const Tensor& x = xs[t];
    TESSERA_CHECK(x.is_contiguous() && is_floating(x.dtype()), "cuda squared_norm: tensor ", t,
                  " must be contiguous and floating, got ", x.describe());
    const int64_t vecs = (x.numel() + kVecWidth<float> - 1) / kVecWidth<float>;
    blocks[t] = x.numel() == 0
                    ? 0
                    : std::clamp<int64_t>((vecs + kNormVecsPerBlock - 1) / kNormVecsPerBlock, 1,
                                          kNormMaxBlocks);
    total_blocks += blocks[t];
  }
  DeviceScratch<double> partials(size_t(total_blocks), stream, "squared_norm");
  int64_t at = 0;
  for (size_t t = 0; t < xs.size(); ++t) {
    if (blocks[t] == 0) continue;
    dispatch_device(xs[t].dtype(), [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      if constexpr (!std::is_integral_v<T>) {
        const T* xp = typed<const T>(xs[t], "squared_norm");
        launch(squares_kernel<T>,
               LaunchConfig{dim3(unsigned(blocks[t])), dim3(kThreads), 0, stream, "squared_norm"},
               xp, xs[t].numel(), is_aligned16(xp), partials.data() + at);
      }
    });
    at += blocks[t];
  }
  launch(sum_partials_kernel,
         LaunchConfig{dim3(1), dim3(kThreads), 0, stream, "squared_norm_total"}, partials.data(),
         total_blocks, typed<float>(out, "squared_norm"));
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
