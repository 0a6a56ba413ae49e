// Fused cross-entropy (cross_entropy.h). Memory-bound.
//
// Forward: one block per row reads the row once, each thread keeping an online (max, sum of
// exp(x - max)) pair over its elements, merged across the block with shuffles and shared memory;
// lse = max + log(sum). A second, single-block kernel forms the loss: thread i sums the terms
// lse[r] - logit[r, target[r]] of rows r = i, i + blockDim, ... in row order (in double), and the
// per-thread sums meet in a fixed butterfly, so the mean is deterministic without float atomics
// or per-row scratch. It reads only lse and one logit per row.
//
// Backward: one block per row writes dlogits = (exp(x - lse) - onehot) * gloss / valid in one
// pass, reading each logit once; probabilities never touch memory. Ignored rows are zero.
// 16-byte vector loads/stores where the rows are aligned, with a scalar tail for a vocabulary
// that is no multiple of the vector width.

#include "tessera/cuda/kernels/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kRowThreads = 256;
constexpr int kLossThreads = 256;

// Calls f(j, value) on this thread's elements of a row of n: on the vector path
// kVecWidth<T> at a time over the aligned body, then one at a time over the ragged tail.
template <class T, bool kVec, class F>
__device__ __forceinline__ void for_row(const T* row, int64_t n, F&& f) {
  using A = acc_t<T>;
  int64_t tail = 0;
  if constexpr (kVec) {
    constexpr int W = kVecWidth<T>;
    for (int64_t c = threadIdx.x; c < n / W; c += blockDim.x) {
      A v[W];
      load_vec(row + c * W, v);
      for (int k = 0; k < W; ++k) f(c * W + k, v[k]);
    }
    tail = n / W * W;
  }
  for (int64_t j = tail + threadIdx.x; j < n; j += blockDim.x) f(j, load_acc(row + j));
}

// The online pair (m, s): s = sum of exp(x - m) over the elements seen, m their max.
template <class A>
struct MaxSum {
  A m, s;
};

template <class A>
__device__ __forceinline__ MaxSum<A> merge(MaxSum<A> a, MaxSum<A> b) {
  const A m = a.m > b.m ? a.m : b.m;
  // Both empty (-inf), or an infinite max: the scale factors would be exp(nan).
  if (m == -INFINITY || m == INFINITY) return {m, m == INFINITY ? A(1) : A(0)};
  return {m, a.s * exp(a.m - m) + b.s * exp(b.m - m)};
}

template <class A>
__device__ MaxSum<A> block_merge(MaxSum<A> v, SharedPtr<A> ms, SharedPtr<A> ss) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const MaxSum<A> other{__shfl_xor_sync(kFullMask, v.m, offset),
                          __shfl_xor_sync(kFullMask, v.s, offset)};
    v = merge(v, other);
  }
  const unsigned lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  if (lane == 0) {
    ms[warp] = v.m;
    ss[warp] = v.s;
  }
  __syncthreads();
  MaxSum<A> total{A(-INFINITY), A(0)};
  for (unsigned w = 0; w < blockDim.x / warpSize; ++w) total = merge(total, {ms[w], ss[w]});
  return total;
}

template <class T, bool kVec>
__global__ void lse_kernel(const T* __restrict__ logits, int64_t ld, int64_t n,
                           acc_t<T>* __restrict__ lse) {
  using A = acc_t<T>;
  TESSERA_SHARED(A, ms, 32);
  TESSERA_SHARED(A, ss, 32);
  const int64_t r = blockIdx.x;
  MaxSum<A> acc{A(-INFINITY), A(0)};
  for_row<T, kVec>(logits + r * ld, n, [&](int64_t, A x) {
    if (x == -INFINITY) return;  // contributes exp(-inf) = 0; would make exp(nan) below
    if (x > acc.m) {
      acc.s = acc.s * exp(acc.m - x) + A(1);  // 0 * 0 + 1 on the first element
      acc.m = x;
    } else {
      acc.s += x == INFINITY ? A(0) : exp(x - acc.m);  // NaN poisons the row, as on the CPU
    }
  });
  const MaxSum<A> total = block_merge(acc, ms, ss);
  if (threadIdx.x == 0) lse[r] = total.m == INFINITY ? total.m : total.m + log(total.s);
}

// Single block: loss = mean over valid rows of lse - logit[target], valid = their count.
template <class T, class I>
__global__ void loss_kernel(const T* __restrict__ logits, int64_t ld, int64_t rows, int64_t n,
                            const I* __restrict__ targets, int64_t ignore_index,
                            const acc_t<T>* __restrict__ lse, acc_t<T>* __restrict__ loss,
                            acc_t<T>* __restrict__ valid) {
  using A = acc_t<T>;
  TESSERA_SHARED(double, scratch, 32);
  double total = 0.0, count = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t t = int64_t(targets[r]);
    if (t == ignore_index) continue;
    count += 1.0;
    total += t >= 0 && t < n ? double(lse[r] - load_acc(logits + r * ld + t)) : NAN;
  }
  total = block_sum(total, scratch);
  count = block_sum(count, scratch);
  if (threadIdx.x == 0) {
    *loss = count > 0.0 ? A(total / count) : A(0);
    *valid = A(count);
  }
}

template <class T, class I, bool kVec>
__global__ void cross_entropy_backward_kernel(const T* __restrict__ logits, int64_t ld, int64_t n,
                                              const I* __restrict__ targets, int64_t ignore_index,
                                              const acc_t<T>* __restrict__ lse,
                                              const acc_t<T>* __restrict__ gloss,
                                              const acc_t<T>* __restrict__ valid,
                                              T* __restrict__ glogits, int64_t gld) {
  using A = acc_t<T>;
  const int64_t r = blockIdx.x;
  const int64_t t = int64_t(targets[r]);
  T* grow = glogits + r * gld;
  const A count = *valid;
  // No valid rows: every row is ignored, and the gradient is 0, not 0/0.
  const A scale = count > A(0) ? *gloss / count : A(0);
  const bool ignored = t == ignore_index;
  const A bad = t >= 0 && t < n ? A(0) : A(NAN);  // an out-of-range target poisons its row
  const A l = lse[r];
  const T* xr = logits + r * ld;
  auto grad = [&](int64_t j, A x) {
    return ignored ? A(0) : exp(x - l) * scale - (j == t ? scale : A(0)) + bad;
  };
  int64_t tail = 0;
  if constexpr (kVec) {
    constexpr int W = kVecWidth<T>;
    for (int64_t c = threadIdx.x; c < n / W; c += blockDim.x) {
      A v[W];
      load_vec(xr + c * W, v);
      for (int k = 0; k < W; ++k) v[k] = grad(c * W + k, v[k]);
      store_vec(grow + c * W, v);
    }
    tail = n / W * W;
  }
  for (int64_t j = tail + threadIdx.x; j < n; j += blockDim.x)
    grow[j] = convert<T>(grad(j, load_acc(xr + j)));
}

void check_args(const char* op, const Tensor& logits, const Tensor& targets, const Tensor& lse) {
  const DType d = logits.dtype();
  TESSERA_CHECK(d == DType::f32 || d == DType::f64 || d == DType::bf16 || d == DType::f16, op,
                " on cuda: logits ", logits.describe(), " must be f32, f64, bf16 or f16");
  TESSERA_CHECK(logits.dim() == 2 && (logits.size(1) <= 1 || logits.stride(1) == 1), op,
                " on cuda: logits ", logits.describe(), " with strides ", logits.strides(),
                " must be [N, V] with unit stride in V");
  TESSERA_CHECK(targets.dtype() == DType::i32 || targets.dtype() == DType::i64, op,
                " on cuda: targets ", targets.describe(), " must be i32 or i64");
  const DType want = d == DType::f64 ? DType::f64 : DType::f32;
  TESSERA_CHECK(lse.dtype() == want, op, " on cuda: lse ", lse.describe(), " must be ",
                dtype_name(want), " for logits ", logits.describe());
}

// Whether rows at `p` with row stride ld (elements of T) are all 16-byte aligned.
template <class T>
bool aligned_rows(const void* p, int64_t ld) {
  return is_aligned16(p) && (ld * int64_t(sizeof(T))) % 16 == 0;
}

// Calls f(T*, I*) for the logits' and targets' device element types.
template <class F>
void dispatch(const Tensor& logits, const Tensor& targets, F&& f) {
  dispatch_device(logits.dtype(), [&]<class T>(T* t) {
    if constexpr (std::is_floating_point_v<T> || is_half_type_v<T>) {
      if (targets.dtype() == DType::i32) {
        f(t, static_cast<int32_t*>(nullptr));
      } else {
        f(t, static_cast<int64_t*>(nullptr));
      }
    }
  });
}

}  // namespace

void cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                           const Tensor& loss, const Tensor& lse, const Tensor& valid,
                           cudaStream_t stream) {
  const char* op = "cross_entropy";
  check_args(op, logits, targets, lse);
  const int64_t rows = logits.size(0), n = logits.size(1), ld = logits.stride(0);
  dispatch(logits, targets, [&]<class T, class I>(T*, I*) {
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(logits.data_ptr());
    const I* tg = static_cast<const I*>(targets.data_ptr());
    A* lp = static_cast<A*>(lse.data_ptr());
    if (rows > 0) {
      const LaunchConfig config{dim3(unsigned(rows)), dim3(kRowThreads), 0, stream, op};
      if (aligned_rows<T>(x, ld)) {
        launch(lse_kernel<T, true>, config, x, ld, n, lp);
      } else {
        launch(lse_kernel<T, false>, config, x, ld, n, lp);
      }
    }
    launch(loss_kernel<T, I>, LaunchConfig{dim3(1), dim3(kLossThreads), 0, stream, op}, x, ld, rows,
           n, tg, ignore_index, static_cast<const A*>(lp), static_cast<A*>(loss.data_ptr()),
           static_cast<A*>(valid.data_ptr()));
  });
}

void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& gloss, const Tensor& valid, int64_t ignore_index,
                            const Tensor& glogits, cudaStream_t stream) {
  const char* op = "cross_entropy_backward";
  check_args(op, logits, targets, lse);
  TESSERA_CHECK(glogits.dtype() == logits.dtype() && glogits.shape() == logits.shape() &&
                    (glogits.size(1) <= 1 || glogits.stride(1) == 1),
                op, " on cuda: glogits ", glogits.describe(), " with strides ", glogits.strides(),
                " must match logits ", logits.describe(), " with unit stride in V");
  const int64_t rows = logits.size(0), n = logits.size(1);
  const int64_t ld = logits.stride(0), gld = glogits.stride(0);
  if (rows == 0) return;
  dispatch(logits, targets, [&]<class T, class I>(T*, I*) {
    using A = acc_t<T>;
    const T* x = static_cast<const T*>(logits.data_ptr());
    T* g = static_cast<T*>(glogits.data_ptr());
    const LaunchConfig config{dim3(unsigned(rows)), dim3(kRowThreads), 0, stream, op};
    const bool vec = aligned_rows<T>(x, ld) && aligned_rows<T>(g, gld);
    auto kernel = vec ? cross_entropy_backward_kernel<T, I, true>
                      : cross_entropy_backward_kernel<T, I, false>;
    launch(kernel, config, x, ld, n, static_cast<const I*>(targets.data_ptr()), ignore_index,
           static_cast<const A*>(lse.data_ptr()), static_cast<const A*>(gloss.data_ptr()),
           static_cast<const A*>(valid.data_ptr()), g, gld);
  });
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
