// Causal flash attention (attention.h), FlashAttention-2 style on the SIMT cores.
//
// Layout: a block of 128 threads owns 32 rows (queries in the forward and dQ kernels, keys in
// the dK/dV kernel); each row belongs to a group of 4 lanes that hold its vectors in registers,
// lane g keeping dims 4 * (g + 4c) + e (c < DPL / 4, e < 4), so a dot product is DPL multiply-adds
// per lane plus two xor shuffles. The other operand streams through shared memory in tiles of
// 32 rows (converted to the compute type and zero-padded to Dp = 4 * DPL dims), read by all
// groups at once (broadcast, no bank conflicts).
//
// Forward (f32, f64; bf16 and f16 take the tensor-core kernel of attention_mma.cu): per key tile,
// the 32 scores of a query are kept in registers; an online softmax (running max m and sum l)
// rescales the output accumulator once per tile; lse = m + log(l) is saved. Key tiles wholly in the
// future of every query of the block are never loaded. Backward (D_i = rowsum(dO_i * O_i) first,
// one warp per row, into scratch):
//   dK/dV kernel, one block per (b, kv head, key tile): for every query head of the GQA group
//   and every query from the first one that sees the tile, P = exp(scale q.k - lse),
//   dV += P dO, dS = P (dO.v - D_i), dK += dS q; dK *= scale.
//   dQ kernel, one block per (b, head, query tile): dQ += dS k over the visible keys; *= scale.
// Every output row has one owner that adds its terms in a fixed order: deterministic, no
// atomics; the price is computing P and dP twice, as on the CPU backend.
//
// Bound: compute. Per head the forward does two Tq x Tk x D products (S = Q K^T, then P V), the
// backward seven (S and dP in each of its two kernels, dV, dK, dQ), about half of each masked
// away by the causal mask (skipped only for whole tiles). They run as SIMT FMAs, so this path is
// bounded by the CUDA-core FMA rate and by shared-memory bandwidth (one shared load per FMA),
// not by the tensor cores.

#include "tessera/cuda/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "tessera/cuda/kernels/attention_heads.h"
#include "tessera/cuda/kernels/scratch.h"
#include "tessera/cuda/kernels/vector_io.h"

// The score loops index a register array (s[kTile]), so they must unroll completely on the GPU.
#if defined(__CUDACC__)
#define TESSERA_UNROLL _Pragma("unroll")
#else
#define TESSERA_UNROLL
#endif

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kGroup = 4;  // lanes per row
constexpr int kRows = 32;  // rows owned by a block
constexpr int kTile = 32;  // rows per shared-memory tile
constexpr int kThreads = kRows * kGroup;
constexpr int kDeltaRows = 4;  // rows per block of the D_i kernel (one warp each)

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

// The model dim of element idx (< DPL) of lane g's share of a row.
__device__ __forceinline__ int lane_dim(int g, int idx) {
  return 4 * (g + kGroup * (idx / 4)) + idx % 4;
}

// Sum over the 4 lanes of a row group (xor 1, xor 2 stay inside the group).
template <class A>
__device__ __forceinline__ A group_sum(A v) {
  v += __shfl_xor_sync(kFullMask, v, 1);
  v += __shfl_xor_sync(kFullMask, v, 2);
  return v;
}

// Lane g's share of a row of D elements (zeros past D, or everywhere when row is null).
template <class T, int DPL>
__device__ __forceinline__ void load_lane(const T* row, int D, int g, acc_t<T> (&r)[DPL]) {
  for (int idx = 0; idx < DPL; ++idx) {
    const int d = lane_dim(g, idx);
    r[idx] = row != nullptr && d < D ? load_acc(row + d) : acc_t<T>(0);
  }
}

template <class T, int DPL>
__device__ __forceinline__ void store_lane(T* row, int D, int g, const acc_t<T> (&r)[DPL],
                                           acc_t<T> factor) {
  for (int idx = 0; idx < DPL; ++idx) {
    const int d = lane_dim(g, idx);
    if (d < D) row[d] = convert<T>(r[idx] * factor);
  }
}

// Lane g's partial dot product of its share with row j of a shared tile of Dp-wide rows.
template <int DPL, class A>
__device__ __forceinline__ A lane_dot(const A (&r)[DPL], SharedPtr<A> tile, int base, int g) {
  A sum = A(0);
  for (int idx = 0; idx < DPL; ++idx) sum += r[idx] * A(tile[base + lane_dim(g, idx)]);
  return sum;
}

// r += p * (row at base of the tile), over lane g's share.
template <int DPL, class A>
__device__ __forceinline__ void lane_axpy(A (&r)[DPL], A p, SharedPtr<A> tile, int base, int g) {
  for (int idx = 0; idx < DPL; ++idx) r[idx] += p * A(tile[base + lane_dim(g, idx)]);
}

// tile[offset + r * Dp + d] = x.row(b, h, t0 + r)[d] for r < n, d < D; zero elsewhere (rows up
// to kTile). Coalesced along D.
template <class T, int DPL>
__device__ void fill_tile(SharedPtr<acc_t<T>> tile, int offset, const Heads<const T>& x, int64_t b,
                          int64_t h, int64_t t0, int64_t n, int D) {
  constexpr int Dp = kGroup * DPL;
  for (int idx = threadIdx.x; idx < kTile * Dp; idx += blockDim.x) {
    const int r = idx / Dp, d = idx % Dp;
    tile[offset + idx] = r < n && d < D ? load_acc(x.row(b, h, t0 + r) + d) : acc_t<T>(0);
  }
}

template <class T, int DPL>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(Heads<const T> q, Heads<const T> k, Heads<const T> v, Heads<T> o,
                             int64_t H, int64_t group, int64_t Tq, int64_t Tk, int D,
                             acc_t<T> scale, acc_t<T>* __restrict__ lse) {
  using A = acc_t<T>;
  constexpr int Dp = kGroup * DPL;
  TESSERA_DYNAMIC_SHARED(A, smem);                // K tile [kTile, Dp], then V tile [kTile, Dp]
  const int64_t qb = gridDim.x - 1 - blockIdx.x;  // the longest (last) query tiles first
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H, hk = h / group;
  const int row = int(threadIdx.x) / kGroup, g = int(threadIdx.x) % kGroup;
  const int64_t shift = Tk - Tq, i = qb * kRows + row, pos = shift + i;
  const bool active = i < Tq;
  A qr[DPL], acc[DPL];
  load_lane<T, DPL>(active ? q.row(b, h, i) : nullptr, D, g, qr);
  for (int idx = 0; idx < DPL; ++idx) acc[idx] = A(0);
  A m = A(-INFINITY), l = A(0);
  const int64_t last_pos = shift + min64(Tq, (qb + 1) * kRows) - 1;
  for (int64_t j0 = 0; j0 <= last_pos; j0 += kTile) {
    const int64_t nk = min64(kTile, Tk - j0);
    __syncthreads();  // every group is done with the previous tile
    fill_tile<T, DPL>(smem, 0, k, b, hk, j0, nk, D);
    fill_tile<T, DPL>(smem, kTile * Dp, v, b, hk, j0, nk, D);
    __syncthreads();
    A s[kTile];
    A tile_max = A(-INFINITY);
    TESSERA_UNROLL
    for (int j = 0; j < kTile; ++j) {
      const A dot = group_sum(lane_dot<DPL>(qr, smem, j * Dp, g));
      s[j] = j < nk && j0 + j <= pos ? dot * scale : A(-INFINITY);
      tile_max = max(tile_max, s[j]);
    }
    const A m_new = max(m, tile_max);
    if (m_new == A(-INFINITY)) continue;  // the whole tile is in this query's future
    const A alpha = exp(m - m_new);       // 0 on the first tile (m = -inf)
    for (int idx = 0; idx < DPL; ++idx) acc[idx] *= alpha;
    A psum = A(0);
    TESSERA_UNROLL
    for (int j = 0; j < kTile; ++j) {
      const A p = exp(s[j] - m_new);
      psum += p;
      lane_axpy<DPL>(acc, p, smem, (kTile + j) * Dp, g);
    }
    l = l * alpha + psum;
    m = m_new;
  }
  if (!active) return;
  store_lane<T, DPL>(o.row(b, h, i), D, g, acc, A(1) / l);
  if (g == 0) lse[bh * Tq + i] = m + log(l);
}

// delta[row] = sum over d of gout[row, d] * out[row, d], rows in (b, h, t) order; a warp per row.
template <class T>
__global__ void attention_delta_kernel(Heads<const T> o, Heads<const T> go, int64_t H, int64_t Tq,
                                       int D, int64_t rows, acc_t<T>* __restrict__ delta) {
  using A = acc_t<T>;
  const int64_t r = int64_t(blockIdx.x) * kDeltaRows + threadIdx.x / warpSize;
  if (r >= rows) return;  // a whole warp leaves together
  const int64_t bh = r / Tq, t = r % Tq, b = bh / H, h = bh % H;
  const T* orow = o.row(b, h, t);
  const T* grow = go.row(b, h, t);
  A sum = A(0);
  for (int d = int(threadIdx.x % warpSize); d < D; d += warpSize)
    sum += load_acc(orow + d) * load_acc(grow + d);
  sum = warp_sum(sum);
  if (threadIdx.x % warpSize == 0) delta[r] = sum;
}

template <class T, int DPL>
__global__ void __launch_bounds__(kThreads)
    attention_dkv_kernel(Heads<const T> q, Heads<const T> k, Heads<const T> v, Heads<const T> go,
                         const acc_t<T>* __restrict__ lse, const acc_t<T>* __restrict__ delta,
                         Heads<T> gk, Heads<T> gv, int64_t H, int64_t Hkv, int64_t group,
                         int64_t Tq, int64_t Tk, int D, acc_t<T> scale) {
  using A = acc_t<T>;
  constexpr int Dp = kGroup * DPL;
  // Q tile [kTile, Dp], dO tile [kTile, Dp], then lse and D_i of those queries.
  TESSERA_DYNAMIC_SHARED(A, smem);
  constexpr int kGo = kTile * Dp, kLse = 2 * kTile * Dp, kDelta = kLse + kTile;
  const int64_t bhk = blockIdx.y, b = bhk / Hkv, hk = bhk % Hkv;
  const int row = int(threadIdx.x) / kGroup, g = int(threadIdx.x) % kGroup;
  const int64_t j0 = int64_t(blockIdx.x) * kRows, j = j0 + row, shift = Tk - Tq;
  const bool active = j < Tk;
  A kr[DPL], vr[DPL], dk[DPL], dv[DPL];
  load_lane<T, DPL>(active ? k.row(b, hk, j) : nullptr, D, g, kr);
  load_lane<T, DPL>(active ? v.row(b, hk, j) : nullptr, D, g, vr);
  for (int idx = 0; idx < DPL; ++idx) dk[idx] = dv[idx] = A(0);
  const int64_t first_i = j0 > shift ? j0 - shift : 0;  // the first query that sees key j0
  for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
    for (int64_t i0 = first_i; i0 < Tq; i0 += kTile) {
      const int64_t nq = min64(kTile, Tq - i0);
      __syncthreads();
      fill_tile<T, DPL>(smem, 0, q, b, h, i0, nq, D);
      fill_tile<T, DPL>(smem, kGo, go, b, h, i0, nq, D);
      if (threadIdx.x < nq) {
        smem[kLse + threadIdx.x] = lse[(b * H + h) * Tq + i0 + threadIdx.x];
        smem[kDelta + threadIdx.x] = delta[(b * H + h) * Tq + i0 + threadIdx.x];
      }
      __syncthreads();
      for (int r = 0; r < nq; ++r) {
        const A s = group_sum(lane_dot<DPL>(kr, smem, r * Dp, g));
        const A p = j <= shift + i0 + r ? exp(s * scale - A(smem[kLse + r])) : A(0);
        const A dp = group_sum(lane_dot<DPL>(vr, smem, kGo + r * Dp, g));
        const A ds = p * (dp - A(smem[kDelta + r]));
        lane_axpy<DPL>(dv, p, smem, kGo + r * Dp, g);
        lane_axpy<DPL>(dk, ds, smem, r * Dp, g);
      }
    }
  }
  if (!active) return;
  store_lane<T, DPL>(gk.row(b, hk, j), D, g, dk, scale);
  store_lane<T, DPL>(gv.row(b, hk, j), D, g, dv, A(1));
}

template <class T, int DPL>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(Heads<const T> q, Heads<const T> k, Heads<const T> v, Heads<const T> go,
                        const acc_t<T>* __restrict__ lse, const acc_t<T>* __restrict__ delta,
                        Heads<T> gq, int64_t H, int64_t group, int64_t Tq, int64_t Tk, int D,
                        acc_t<T> scale) {
  using A = acc_t<T>;
  constexpr int Dp = kGroup * DPL;
  TESSERA_DYNAMIC_SHARED(A, smem);  // K tile [kTile, Dp], then V tile [kTile, Dp]
  const int64_t qb = gridDim.x - 1 - blockIdx.x;
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H, hk = h / group;
  const int row = int(threadIdx.x) / kGroup, g = int(threadIdx.x) % kGroup;
  const int64_t shift = Tk - Tq, i = qb * kRows + row, pos = shift + i;
  const bool active = i < Tq;
  A qr[DPL], gr[DPL], dq[DPL];
  load_lane<T, DPL>(active ? q.row(b, h, i) : nullptr, D, g, qr);
  load_lane<T, DPL>(active ? go.row(b, h, i) : nullptr, D, g, gr);
  for (int idx = 0; idx < DPL; ++idx) dq[idx] = A(0);
  const A L = active ? lse[bh * Tq + i] : A(0);
  const A Di = active ? delta[bh * Tq + i] : A(0);
  const int64_t last_pos = shift + min64(Tq, (qb + 1) * kRows) - 1;
  for (int64_t j0 = 0; j0 <= last_pos; j0 += kTile) {
    const int64_t nk = min64(kTile, Tk - j0);
    __syncthreads();
    fill_tile<T, DPL>(smem, 0, k, b, hk, j0, nk, D);
    fill_tile<T, DPL>(smem, kTile * Dp, v, b, hk, j0, nk, D);
    __syncthreads();
    for (int j = 0; j < nk; ++j) {
      const A s = group_sum(lane_dot<DPL>(qr, smem, j * Dp, g));
      const A p = active && j0 + j <= pos ? exp(s * scale - L) : A(0);
      const A dp = group_sum(lane_dot<DPL>(gr, smem, (kTile + j) * Dp, g));
      lane_axpy<DPL>(dq, p * (dp - Di), smem, j * Dp, g);
    }
  }
  if (active) store_lane<T, DPL>(gq.row(b, h, i), D, g, dq, scale);
}

void check_layout(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                  std::initializer_list<const Tensor*> rows_of_d) {
  const DType d = q.dtype();
  TESSERA_CHECK(d == DType::f32 || d == DType::f64 || d == DType::bf16 || d == DType::f16, op,
                " on cuda: q ", q.describe(), " must be f32, f64, bf16 or f16");
  TESSERA_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && k.dtype() == d && v.dtype() == d &&
                    k.shape() == v.shape() && q.size(0) == k.size(0) && q.size(3) == k.size(3) &&
                    k.size(1) > 0 && q.size(1) % k.size(1) == 0 && q.size(2) <= k.size(2),
                op, " on cuda: q ", q.describe(), ", k ", k.describe(), ", v ", v.describe(),
                " must be [B, H, Tq, D] and [B, Hkv, Tk, D] with H % Hkv == 0 and Tq <= Tk");
  TESSERA_CHECK(q.size(3) <= 128, op, " on cuda: head dim ", q.size(3), " of q ", q.describe(),
                " is over the supported maximum of 128");
  for (const Tensor* t : rows_of_d)
    TESSERA_CHECK(t->size(3) <= 1 || t->stride(3) == 1, op, " on cuda: ", t->describe(),
                  " with strides ", t->strides(), " needs unit stride in D");
}

// Calls f(T*, std::integral_constant<int, DPL>) for q's element type and the smallest DPL in
// {4, 8, 16, 32} with 4 * DPL >= D.
template <class F>
void dispatch(const Tensor& q, F&& f) {
  const int64_t D = q.size(3);
  dispatch_device(q.dtype(), [&]<class T>(T* t) {
    if constexpr (std::is_floating_point_v<T> || is_half_type_v<T>) {
      if (D <= 16) {
        f(t, std::integral_constant<int, 4>());
      } else if (D <= 32) {
        f(t, std::integral_constant<int, 8>());
      } else if (D <= 64) {
        f(t, std::integral_constant<int, 16>());
      } else {
        f(t, std::integral_constant<int, 32>());
      }
    }
  });
}

template <class T, int DPL>
void forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
             const Tensor& lse, cudaStream_t stream) {
  using A = acc_t<T>;
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), Tk = k.size(2);
  const size_t shared = size_t(2 * kTile * kGroup * DPL) * sizeof(A);
  const dim3 grid(unsigned((Tq + kRows - 1) / kRows), unsigned(B * H));
  launch(attention_forward_kernel<T, DPL>,
         LaunchConfig{grid, dim3(kThreads), shared, stream, "attention"}, heads<const T>(q),
         heads<const T>(k), heads<const T>(v), heads<T>(out), H, H / Hkv, Tq, Tk, int(D), A(scale),
         static_cast<A*>(lse.data_ptr()));
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                       const Tensor& out, const Tensor& lse, cudaStream_t stream) {
  const char* op = "attention";
  check_layout(op, q, k, v, {&q, &k, &v, &out});
  if (q.size(0) * q.size(1) * q.size(2) == 0) return;
  if (q.dtype() == DType::bf16 || q.dtype() == DType::f16)
    return attention_forward_mma(q, k, v, scale, out, lse, stream);
  dispatch(q, [&]<class T, int DPL>(T*, std::integral_constant<int, DPL>) {
    if constexpr (!is_half_type_v<T>) forward<T, DPL>(q, k, v, scale, out, lse, stream);
  });
}

void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& gout, double scale, const Tensor& gq,
                        const Tensor& gk, const Tensor& gv, cudaStream_t stream) {
  const char* op = "attention backward";
  check_layout(op, q, k, v, {&q, &k, &v, &out, &gout, &gq, &gk, &gv});
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), Tk = k.size(2);
  if (B * Hkv * Tk == 0) return;
  dispatch(q, [&]<class T, int DPL>(T*, std::integral_constant<int, DPL>) {
    using A = acc_t<T>;
    const int64_t rows = B * H * Tq;
    DeviceScratch<A> delta(size_t(rows), stream, op);
    if (rows > 0)
      launch(attention_delta_kernel<T>,
             LaunchConfig{dim3(unsigned((rows + kDeltaRows - 1) / kDeltaRows)),
                          dim3(kDeltaRows * 32), 0, stream, op},
             heads<const T>(out), heads<const T>(gout), H, Tq, int(D), rows, delta.data());
    const A* lp = static_cast<const A*>(lse.data_ptr());
    const size_t kv_shared = size_t(2 * kTile * kGroup * DPL + 2 * kTile) * sizeof(A);
    launch(attention_dkv_kernel<T, DPL>,
           LaunchConfig{dim3(unsigned((Tk + kRows - 1) / kRows), unsigned(B * Hkv)), dim3(kThreads),
                        kv_shared, stream, op},
           heads<const T>(q), heads<const T>(k), heads<const T>(v), heads<const T>(gout), lp,
           static_cast<const A*>(delta.data()), heads<T>(gk), heads<T>(gv), H, Hkv, H / Hkv, Tq, Tk,
           int(D), A(scale));
    if (rows > 0) {
      const size_t q_shared = size_t(2 * kTile * kGroup * DPL) * sizeof(A);
      launch(attention_dq_kernel<T, DPL>,
             LaunchConfig{dim3(unsigned((Tq + kRows - 1) / kRows), unsigned(B * H)), dim3(kThreads),
                          q_shared, stream, op},
             heads<const T>(q), heads<const T>(k), heads<const T>(v), heads<const T>(gout), lp,
             static_cast<const A*>(delta.data()), heads<T>(gq), H, H / Hkv, Tq, Tk, int(D),
             A(scale));
    }
  });
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
