// LayerNorm and RMSNorm (norm.h). Memory-bound: one block per row; the forward pass reads the
// row three times (sum, centred sum of squares, normalise), the second and third from L1/L2,
// so DRAM sees one read of x and one write of y. Statistics use two passes (mean, then mean
// squared deviation) as the CPU backend does, avoiding the cancellation of E[x^2] - E[x]^2.
// 16-byte vector loads/stores when every row is 16-byte aligned, else a scalar path.
//
// Backward: one block per fixed chunk of rows (chunk boundaries depend only on `rows`). Each
// row's gx needs two row sums (of g = gy * w and of g * xhat), then one more pass writes gx.
// gw and gb (sums over rows) are accumulated per chunk into a scratch [chunks, n] partial
// buffer, each column owned by one thread of the block and summed in row order, then a second
// kernel adds the chunk partials column by column in chunk order. No float atomics: the
// result is bit-identical from run to run.

#include "tessera/cuda/kernels/norm.h"

#include <algorithm>

#include "tessera/cuda/kernels/scratch.h"
#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

// At least this many rows per backward chunk (the partials cost at most 1/8 extra adds), and
// at most kMaxChunks chunks (the column reduction stays short).
constexpr int64_t kMinRowsPerChunk = 8;
constexpr int64_t kMaxChunks = 512;
constexpr int kColumnThreads = 256;

// Calls f(i, values) on this thread's elements of the row: W consecutive elements at a time,
// W = kVecWidth<T> on the vector path (every row 16-byte aligned, n % W == 0), else 1.
template <class T, bool kVec, class F>
__device__ __forceinline__ void for_row(const T* row, int64_t n, F&& f) {
  using A = acc_t<T>;
  if constexpr (kVec) {
    constexpr int W = kVecWidth<T>;
    for (int64_t c = threadIdx.x; c < n / W; c += blockDim.x) {
      A v[W];
      load_vec(row + c * W, v);
      f(c * W, v);
    }
  } else {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      A v[1] = {load_acc(row + i)};
      f(i, v);
    }
  }
}

template <class T, bool kVec>
inline constexpr int kWidth = kVec ? kVecWidth<T> : 1;

template <class T, bool kVec, int W = kWidth<T, kVec>>
__device__ __forceinline__ void load_w(const T* p, acc_t<T> (&v)[W]) {
  if constexpr (kVec) {
    load_vec(p, v);
  } else {
    v[0] = load_acc(p);
  }
}

template <class T, bool kVec, int W = kWidth<T, kVec>>
__device__ __forceinline__ void store_w(T* p, const acc_t<T> (&v)[W]) {
  if constexpr (kVec) {
    store_vec(p, v);
  } else {
    *p = convert<T>(v[0]);
  }
}

// One block per row. kCentered: LayerNorm (mean subtracted, mean saved); else RMSNorm.
// bias may be null.
template <class T, bool kVec, bool kCentered>
__global__ void norm_forward_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                    const T* __restrict__ bias, int64_t n, acc_t<T> eps,
                                    T* __restrict__ y, acc_t<T>* __restrict__ mean,
                                    acc_t<T>* __restrict__ rstd) {
  using A = acc_t<T>;
  constexpr int W = kWidth<T, kVec>;
  TESSERA_SHARED(A, scratch, 32);
  const int64_t r = blockIdx.x;
  const T* xr = x + r * n;
  A mu = A(0);
  if constexpr (kCentered) {
    A s = A(0);
    for_row<T, kVec>(xr, n, [&](int64_t, const A(&v)[W]) {
      for (int k = 0; k < W; ++k) s += v[k];
    });
    mu = block_sum(s, scratch) / A(n);
  }
  A ss = A(0);
  for_row<T, kVec>(xr, n, [&](int64_t, const A(&v)[W]) {
    for (int k = 0; k < W; ++k) ss += (v[k] - mu) * (v[k] - mu);
  });
  const A rs = A(1) / sqrt(block_sum(ss, scratch) / A(n) + eps);
  for_row<T, kVec>(xr, n, [&](int64_t i, const A(&v)[W]) {
    A w[W], out[W];
    load_w<T, kVec>(weight + i, w);
    for (int k = 0; k < W; ++k) out[k] = (v[k] - mu) * rs * w[k];
    if (bias != nullptr) {
      A b[W];
      load_w<T, kVec>(bias + i, b);
      for (int k = 0; k < W; ++k) out[k] += b[k];
    }
    store_w<T, kVec>(y + r * n + i, out);
  });
  if (threadIdx.x == 0) {
    if constexpr (kCentered) mean[r] = mu;
    rstd[r] = rs;
  }
}

// One block per chunk of rows [rows * c / chunks, rows * (c + 1) / chunks). mean is null for
// RMSNorm. part_w / part_b ([chunks, n]) are null when not wanted.
template <class T, bool kVec>
__global__ void norm_backward_kernel(const T* __restrict__ x, const T* __restrict__ weight,
                                     const acc_t<T>* __restrict__ mean,
                                     const acc_t<T>* __restrict__ rstd, const T* __restrict__ gy,
                                     T* __restrict__ gx, int64_t rows, int64_t n,
                                     acc_t<T>* __restrict__ part_w, acc_t<T>* __restrict__ part_b) {
  using A = acc_t<T>;
  constexpr int W = kWidth<T, kVec>;
  TESSERA_SHARED(A, scratch, 32);
  const int64_t chunks = gridDim.x, c = blockIdx.x;
  const int64_t begin = rows * c / chunks, end = rows * (c + 1) / chunks;
  A* pw = part_w != nullptr ? part_w + c * n : nullptr;
  A* pb = part_b != nullptr ? part_b + c * n : nullptr;
  const A inv_n = A(1) / A(n);
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = x + r * n;
    const T* gr = gy + r * n;
    const A mu = mean != nullptr ? mean[r] : A(0);
    const A rs = rstd[r];
    A sum_g = A(0), sum_gx = A(0);
    for_row<T, kVec>(xr, n, [&](int64_t i, const A(&v)[W]) {
      A g[W], w[W];
      load_w<T, kVec>(gr + i, g);
      load_w<T, kVec>(weight + i, w);
      for (int k = 0; k < W; ++k) {
        const A gw = g[k] * w[k];
        sum_g += gw;
        sum_gx += gw * (v[k] - mu) * rs;
      }
    });
    const A dot = block_sum(sum_gx, scratch) * inv_n;
    const A mean_g = mean != nullptr ? block_sum(sum_g, scratch) * inv_n : A(0);
    for_row<T, kVec>(xr, n, [&](int64_t i, const A(&v)[W]) {
      A g[W], w[W], out[W];
      load_w<T, kVec>(gr + i, g);
      load_w<T, kVec>(weight + i, w);
      for (int k = 0; k < W; ++k) {
        const A xhat = (v[k] - mu) * rs;
        out[k] = rs * (g[k] * w[k] - mean_g - xhat * dot);
        // Each thread owns the same columns in every row, so it accumulates them without
        // races; the chunk's first row initialises them.
        if (pw != nullptr) pw[i + k] = (r == begin ? A(0) : pw[i + k]) + g[k] * xhat;
        if (pb != nullptr) pb[i + k] = (r == begin ? A(0) : pb[i + k]) + g[k];
      }
      store_w<T, kVec>(gx + r * n + i, out);
    });
  }
}

// dst[j] = sum over chunks c (in order) of part[c, j], rounded to T.
template <class T>
__global__ void column_sum_kernel(const acc_t<T>* __restrict__ part, int64_t chunks, int64_t n,
                                  T* __restrict__ dst) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  acc_t<T> total = 0;
  for (int64_t c = 0; c < chunks; ++c) total += part[c * n + j];
  dst[j] = convert<T>(total);
}

// Threads per row block: whole warps, about one vector per thread, at most 256.
int row_threads(int64_t n, int width) {
  const int64_t items = (n + width - 1) / width;
  return int(std::clamp<int64_t>((items + 31) / 32 * 32, 32, 256));
}

void check_dtype(const char* op, const Tensor& x, const Tensor& stats) {
  const DType d = x.dtype();
  TESSERA_CHECK(d == DType::f32 || d == DType::f64 || d == DType::bf16 || d == DType::f16, op,
                " on cuda: x ", x.describe(), " must be f32, f64, bf16 or f16");
  const DType want = d == DType::f64 ? DType::f64 : DType::f32;
  TESSERA_CHECK(stats.dtype() == want, op, " on cuda: statistics ", stats.describe(), " must be ",
                dtype_name(want), " for x ", x.describe());
  TESSERA_CHECK(x.dim() == 2 && x.is_contiguous(), op, " on cuda: x ", x.describe(),
                " must be a contiguous [rows, n] matrix");
}

// Whether the rows of every tensor in `ps` (each [rows, n] or [n] of T) are 16-byte aligned.
template <class T>
bool vector_rows(int64_t n, std::initializer_list<const void*> ps) {
  if (n % kVecWidth<T> != 0) return false;
  for (const void* p : ps)
    if (p != nullptr && !is_aligned16(p)) return false;
  return true;
}

template <class T>
T* ptr(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

template <bool kCentered>
void forward(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
             const Tensor& y, const Tensor& mean, const Tensor& rstd, cudaStream_t stream) {
  check_dtype(op, x, rstd);
  const int64_t rows = x.size(0), n = x.size(1);
  if (rows == 0 || n == 0) return;
  dispatch_device(x.dtype(), [&]<class T>(T*) {
    if constexpr (std::is_floating_point_v<T> || is_half_type_v<T>) {
      using A = acc_t<T>;
      const T* xp = ptr<const T>(x);
      const T* wp = ptr<const T>(weight);
      const T* bp = ptr<const T>(bias);
      T* yp = ptr<T>(y);
      const bool vec = vector_rows<T>(n, {xp, wp, bp, yp});
      const int threads = row_threads(n, vec ? kVecWidth<T> : 1);
      const LaunchConfig config{dim3(unsigned(rows)), dim3(unsigned(threads)), 0, stream, op};
      if (vec) {
        launch(norm_forward_kernel<T, true, kCentered>, config, xp, wp, bp, n, A(eps), yp,
               ptr<A>(mean), ptr<A>(rstd));
      } else {
        launch(norm_forward_kernel<T, false, kCentered>, config, xp, wp, bp, n, A(eps), yp,
               ptr<A>(mean), ptr<A>(rstd));
      }
    }
  });
}

void backward(const char* op, const Tensor& x, const Tensor& weight, const Tensor& mean,
              const Tensor& rstd, const Tensor& gy, const Tensor& gx, const Tensor& gw,
              const Tensor& gb, cudaStream_t stream) {
  check_dtype(op, x, rstd);
  const int64_t rows = x.size(0), n = x.size(1);
  if (n == 0) return;
  dispatch_device(x.dtype(), [&]<class T>(T*) {
    if constexpr (std::is_floating_point_v<T> || is_half_type_v<T>) {
      using A = acc_t<T>;
      const int64_t chunks = std::min((rows + kMinRowsPerChunk - 1) / kMinRowsPerChunk, kMaxChunks);
      // Sums over zero rows: the column kernel writes zeros.
      const int64_t part_chunks = std::max<int64_t>(chunks, 1);
      DeviceScratch<A> part_w(gw.defined() ? size_t(part_chunks * n) : 0, stream, op);
      DeviceScratch<A> part_b(gb.defined() ? size_t(part_chunks * n) : 0, stream, op);
      if (rows > 0) {
        const T* xp = ptr<const T>(x);
        const T* wp = ptr<const T>(weight);
        const T* gyp = ptr<const T>(gy);
        T* gxp = ptr<T>(gx);
        const bool vec = vector_rows<T>(n, {xp, wp, gyp, gxp});
        const int threads = row_threads(n, vec ? kVecWidth<T> : 1);
        const LaunchConfig config{dim3(unsigned(chunks)), dim3(unsigned(threads)), 0, stream, op};
        auto kernel = vec ? norm_backward_kernel<T, true> : norm_backward_kernel<T, false>;
        launch(kernel, config, xp, wp, ptr<const A>(mean), ptr<const A>(rstd), gyp, gxp, rows, n,
               gw.defined() ? part_w.data() : nullptr, gb.defined() ? part_b.data() : nullptr);
      }
      const int64_t used_chunks = rows > 0 ? chunks : 0;
      const LaunchConfig columns{dim3(unsigned((n + kColumnThreads - 1) / kColumnThreads)),
                                 dim3(kColumnThreads), 0, stream, op};
      if (gw.defined())
        launch(column_sum_kernel<T>, columns, part_w.data(), used_chunks, n, ptr<T>(gw));
      if (gb.defined())
        launch(column_sum_kernel<T>, columns, part_b.data(), used_chunks, n, ptr<T>(gb));
    }
  });
}

}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                       const Tensor& y, const Tensor& mean, const Tensor& rstd,
                       cudaStream_t stream) {
  forward<true>("layernorm", x, weight, bias, eps, y, mean, rstd, stream);
}

void layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& gy, const Tensor& gx, const Tensor& gw,
                        const Tensor& gb, cudaStream_t stream) {
  backward("layernorm_backward", x, weight, mean, rstd, gy, gx, gw, gb, stream);
}

void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                     const Tensor& rstd, cudaStream_t stream) {
  forward<false>("rmsnorm", x, weight, Tensor(), eps, y, Tensor(), rstd, stream);
}

void rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& gy,
                      const Tensor& gx, const Tensor& gw, cudaStream_t stream) {
  backward("rmsnorm_backward", x, weight, Tensor(), rstd, gy, gx, gw, Tensor(), stream);
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
