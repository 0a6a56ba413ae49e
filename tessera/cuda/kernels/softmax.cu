// Softmax and log-softmax over the rows of contiguous [rows, n], forward and backward.
// Memory-bound: one warp per row for n <= kWarpRowMax (8 rows per block), one block per row
// beyond. The forward pass reads the row once for an online (max, sum of exp) pair per thread
// (the sum rescaled whenever the running max grows), combines the pairs across the warp/block,
// then reads the row again (from L1/L2) to write the output: one DRAM read and one write.
// The backward pass is a row dot product and a write, the same way. 16-byte vector loads when
// n and the base pointers keep every row 16-byte aligned.
//
// Rows whose max is not finite follow the CPU backend exactly: the exponent shift becomes 0
// (or NaN for a NaN max) and the sum is recomputed with it (a second read, for such rows only).

#include "tessera/cuda/kernels/softmax.h"

#include <algorithm>
#include <type_traits>

#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kWarpRowMax = 1024;

template <class A>
__device__ __forceinline__ A neg_inf() {
  return -A(INFINITY);
}

// The running (max, sum of exp(x - max)) of one thread. s is meaningful only while m is finite;
// rows with a non-finite max are redone (shift_of below).
template <class A>
struct MaxSum {
  A m, s;
};

template <class A>
__device__ __forceinline__ void online_add(MaxSum<A>& a, A x) {
  if (x > a.m || math_isnan(x)) {
    a.s = a.m == neg_inf<A>() ? A(0) : a.s * math_exp(a.m - x);
    a.m = x;
  }
  if (a.m != neg_inf<A>()) a.s += math_exp(x - a.m);
}

template <class A>
__device__ __forceinline__ MaxSum<A> online_merge(MaxSum<A> a, MaxSum<A> b) {
  const A m = nan_max(a.m, b.m);
  if (m == neg_inf<A>()) return {m, A(0)};
  const A sa = a.m == neg_inf<A>() ? A(0) : a.s * math_exp(a.m - m);
  const A sb = b.m == neg_inf<A>() ? A(0) : b.s * math_exp(b.m - m);
  return {m, sa + sb};
}

template <class A>
__device__ __forceinline__ MaxSum<A> warp_merge(MaxSum<A> a) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const MaxSum<A> b{__shfl_xor_sync(kFullMask, a.m, offset),
                      __shfl_xor_sync(kFullMask, a.s, offset)};
    a = online_merge(a, b);
  }
  return a;
}

// The CPU's exponent shift: the max when finite, else 0 (NaN stays NaN).
template <class A>
__device__ __forceinline__ A shift_of(A m) {
  if (math_isnan(m)) return m;
  return (m == neg_inf<A>() || m == -neg_inf<A>()) ? A(0) : m;
}

// ---- per-thread passes over one row: elements tid, tid + step, ... (or 16-byte vectors) ----
template <class T, bool kVec>
__device__ __forceinline__ MaxSum<acc_t<T>> row_max_sum(const T* x, int64_t n, int tid, int step) {
  using A = acc_t<T>;
  MaxSum<A> a{neg_inf<A>(), A(0)};
  int64_t k0 = 0;
  if constexpr (kVec) {
    constexpr int W = kVecWidth<T>;
    for (int64_t v = tid; v < n / W; v += step) {
      A vals[W];
      load_vec(x + v * W, vals);
      for (int j = 0; j < W; ++j) online_add(a, vals[j]);
    }
    k0 = n / W * W;
  }
  for (int64_t k = k0 + tid; k < n; k += step) online_add(a, load_acc(x + k));
  return a;
}

template <class T>
__device__ __forceinline__ acc_t<T> row_exp_sum(const T* x, int64_t n, acc_t<T> shift, int tid,
                                                int step) {
  acc_t<T> s = 0;
  for (int64_t k = tid; k < n; k += step) s += math_exp(load_acc(x + k) - shift);
  return s;
}

template <class T, bool kVec>
__device__ __forceinline__ void row_write(const T* x, T* y, int64_t n, acc_t<T> shift, acc_t<T> sum,
                                          bool log, int tid, int step) {
  using A = acc_t<T>;
  const A lse = shift + math_log(sum);
  auto value = [&](A v) { return log ? v - lse : math_exp(v - shift) / sum; };
  int64_t k0 = 0;
  if constexpr (kVec) {
    constexpr int W = kVecWidth<T>;
    for (int64_t v = tid; v < n / W; v += step) {
      A vals[W];
      load_vec(x + v * W, vals);
      for (int j = 0; j < W; ++j) vals[j] = value(vals[j]);
      store_vec(y + v * W, vals);
    }
    k0 = n / W * W;
  }
  for (int64_t k = k0 + tid; k < n; k += step) y[k] = convert<T>(value(load_acc(x + k)));
}

// dot = sum(gy * y) (softmax) or sum(gy) (log-softmax).
template <class T>
__device__ __forceinline__ acc_t<T> row_dot(const T* y, const T* gy, int64_t n, bool log, int tid,
                                            int step) {
  acc_t<T> dot = 0;
  for (int64_t k = tid; k < n; k += step)
    dot += log ? load_acc(gy + k) : load_acc(gy + k) * load_acc(y + k);
  return dot;
}

template <class T>
__device__ __forceinline__ void row_grad(const T* y, const T* gy, T* gx, int64_t n, acc_t<T> dot,
                                         bool log, int tid, int step) {
  for (int64_t k = tid; k < n; k += step) {
    const acc_t<T> yv = load_acc(y + k), gv = load_acc(gy + k);
    gx[k] = convert<T>(log ? gv - math_exp(yv) * dot : yv * (gv - dot));
  }
}

// ---- kernels ----
template <class T, bool kVec>
__global__ void softmax_warp_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                    int64_t n, bool log) {
  using A = acc_t<T>;
  const int lane = int(threadIdx.x) % warpSize;
  const int64_t warps = blockDim.x / warpSize;
  for (int64_t row = int64_t(blockIdx.x) * warps + threadIdx.x / warpSize; row < rows;
       row += int64_t(gridDim.x) * warps) {
    const T* xr = x + row * n;
    const MaxSum<A> ms = warp_merge(row_max_sum<T, kVec>(xr, n, lane, warpSize));
    const A shift = shift_of(ms.m);
    const A sum = shift == ms.m ? ms.s : warp_sum(row_exp_sum(xr, n, shift, lane, warpSize));
    row_write<T, kVec>(xr, y + row * n, n, shift, sum, log, lane, warpSize);
  }
}

template <class T, bool kVec>
__global__ void softmax_block_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows,
                                     int64_t n, bool log) {
  using A = acc_t<T>;
  TESSERA_SHARED(A, part_m, 32);
  TESSERA_SHARED(A, part_s, 32);
  const int tid = int(threadIdx.x), step = int(blockDim.x);
  const unsigned lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  const unsigned num_warps = blockDim.x / warpSize;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * n;
    MaxSum<A> ms = warp_merge(row_max_sum<T, kVec>(xr, n, tid, step));
    if (lane == 0) {
      part_m[warp] = ms.m;
      part_s[warp] = ms.s;
    }
    __syncthreads();
    ms = lane < num_warps ? MaxSum<A>{A(part_m[lane]), A(part_s[lane])}
                          : MaxSum<A>{neg_inf<A>(), A(0)};
    ms = warp_merge(ms);  // every warp computes the same bits
    __syncthreads();      // part_* is reused by the next row (and block_sum below)
    const A shift = shift_of(ms.m);
    const A sum = shift == ms.m ? ms.s : block_sum(row_exp_sum(xr, n, shift, tid, step), part_s);
    row_write<T, kVec>(xr, y + row * n, n, shift, sum, log, tid, step);
  }
}

template <class T>
__global__ void softmax_backward_warp_kernel(const T* __restrict__ y, const T* __restrict__ gy,
                                             T* __restrict__ gx, int64_t rows, int64_t n,
                                             bool log) {
  const int lane = int(threadIdx.x) % warpSize;
  const int64_t warps = blockDim.x / warpSize;
  for (int64_t row = int64_t(blockIdx.x) * warps + threadIdx.x / warpSize; row < rows;
       row += int64_t(gridDim.x) * warps) {
    const int64_t base = row * n;
    const acc_t<T> dot = warp_sum(row_dot(y + base, gy + base, n, log, lane, warpSize));
    row_grad(y + base, gy + base, gx + base, n, dot, log, lane, warpSize);
  }
}

template <class T>
__global__ void softmax_backward_block_kernel(const T* __restrict__ y, const T* __restrict__ gy,
                                              T* __restrict__ gx, int64_t rows, int64_t n,
                                              bool log) {
  using A = acc_t<T>;
  TESSERA_SHARED(A, scratch, 32);
  const int tid = int(threadIdx.x), step = int(blockDim.x);
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row * n;
    const A dot = block_sum(row_dot(y + base, gy + base, n, log, tid, step), scratch);
    row_grad(y + base, gy + base, gx + base, n, dot, log, tid, step);
  }
}

void check_rows(const char* op, const Tensor& a, const Tensor& b, const Tensor& c) {
  TESSERA_CHECK(a.dim() == 2 && a.is_contiguous() && is_floating(a.dtype()), "cuda ", op,
                ": needs a contiguous floating [rows, n] tensor, got ", a.describe());
  for (const Tensor* t : {&b, &c})
    TESSERA_CHECK(t->is_contiguous() && t->shape() == a.shape() && t->dtype() == a.dtype(), "cuda ",
                  op, ": every operand must be contiguous ", a.describe(), ", got ", t->describe());
}

unsigned warp_row_blocks(int64_t rows) {
  const int64_t warps = kThreads / 32;
  return unsigned(std::min<int64_t>((rows + warps - 1) / warps, 65535));
}

}  // namespace

void softmax(const Tensor& x, const Tensor& out, bool log, cudaStream_t stream) {
  const char* name = log ? "log_softmax" : "softmax";
  check_rows(name, x, out, out);
  const int64_t rows = x.size(0), n = x.size(1);
  if (rows == 0 || n == 0) return;
  dispatch_device(x.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!std::is_integral_v<T>) {
      const T* xp = typed<const T>(x, name);
      T* o = typed<T>(out, name);
      const bool vec = n % kVecWidth<T> == 0 && is_aligned16(xp) && is_aligned16(o);
      if (n <= kWarpRowMax) {
        const LaunchConfig config{dim3(warp_row_blocks(rows)), dim3(kThreads), 0, stream, name};
        launch(vec ? softmax_warp_kernel<T, true> : softmax_warp_kernel<T, false>, config, xp, o,
               rows, n, log);
      } else {
        const LaunchConfig config{dim3(unsigned(std::min<int64_t>(rows, 65535))), dim3(kThreads), 0,
                                  stream, name};
        launch(vec ? softmax_block_kernel<T, true> : softmax_block_kernel<T, false>, config, xp, o,
               rows, n, log);
      }
    }
  });
}

void softmax_backward(const Tensor& y, const Tensor& gy, const Tensor& gx, bool log,
                      cudaStream_t stream) {
  const char* name = log ? "log_softmax_backward" : "softmax_backward";
  check_rows(name, y, gy, gx);
  const int64_t rows = y.size(0), n = y.size(1);
  if (rows == 0 || n == 0) return;
  dispatch_device(y.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!std::is_integral_v<T>) {
      const T* yp = typed<const T>(y, name);
      const T* gp = typed<const T>(gy, name);
      T* o = typed<T>(gx, name);
      if (n <= kWarpRowMax) {
        launch(softmax_backward_warp_kernel<T>,
               LaunchConfig{dim3(warp_row_blocks(rows)), dim3(kThreads), 0, stream, name}, yp, gp,
               o, rows, n, log);
      } else {
        launch(softmax_backward_block_kernel<T>,
               LaunchConfig{dim3(unsigned(std::min<int64_t>(rows, 65535))), dim3(kThreads), 0,
                            stream, name},
               yp, gp, o, rows, n, log);
      }
    }
  });
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
