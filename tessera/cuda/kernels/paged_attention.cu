// Paged attention for serving: one block of 128 threads per (token, head). The token's keys
// 0..p are taken in tiles of 128, one key per thread: each thread finds its key's row through
// the block table (block_tables[s][j / block_size], row j % block_size) and computes its score
// against q (kept in shared memory); the block reduces the tile's max and sum of exp in a fixed
// tree; then each thread owns D / 128 output dimensions and adds the tile's weighted value rows
// into them in key order, after rescaling by exp(m_old - m_new) (an online softmax across
// tiles, as the CPU's across keys). Nothing is atomic and no order depends on scheduling, so
// the result is the same on every run.
//
// Bound: memory. A token at position p reads (p + 1) rows of K and of V (2 (p + 1) D elements)
// for 4 (p + 1) D FLOPs; the K reads of one tile are row-scattered (one row per thread), the V
// reads of a dimension walk the tile's rows. A decode step of B sequences reads each sequence's
// cache once per query head of a group (GQA re-reads a kv head per query head; sharing them
// across the group is a later optimisation).

#include "tessera/cuda/kernels/paged_attention.h"

#include <type_traits>

#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kThreads = 128;  // keys per tile, and threads per block
constexpr int kMaxDims = 4;    // D <= kThreads * kMaxDims = 512 (owned dims per thread)

struct PagedLayout {
  int64_t H, D, block_size, Hkv, max_blocks;
  int64_t qn, qh;  // q strides of n, h (unit stride in D)
  double scale;
};

// The block-wide max (op = 0) or sum (op = 1) of one value per thread, in a fixed tree.
template <class A>
__device__ A block_reduce(A v, SharedPtr<A> scratch, int op) {
  const int t = threadIdx.x;
  scratch[t] = v;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half) {
      const A a = scratch[t], b = scratch[t + half];
      scratch[t] = op == 0 ? (a > b ? a : b) : a + b;
    }
    __syncthreads();
  }
  const A r = scratch[0];
  __syncthreads();
  return r;
}

template <class T>
__global__ void paged_attention_kernel(const T* __restrict__ q, const T* __restrict__ k_cache,
                                       const T* __restrict__ v_cache,
                                       const int32_t* __restrict__ tables,
                                       const int32_t* __restrict__ seq,
                                       const int32_t* __restrict__ pos, T* __restrict__ out,
                                       PagedLayout l) {
  using A = acc_t<T>;
  TESSERA_SHARED(A, q_row, kThreads * kMaxDims);
  TESSERA_SHARED(A, weights, kThreads);
  TESSERA_SHARED(A, scratch, kThreads);
  const int64_t n = blockIdx.x / l.H, h = blockIdx.x % l.H;
  const int64_t hk = h / (l.H / l.Hkv);
  const int t = threadIdx.x;
  const T* qrow = q + n * l.qn + h * l.qh;
  for (int64_t d = t; d < l.D; d += kThreads) q_row[d] = load_acc(qrow + d);
  __syncthreads();
  const int32_t* table = tables + int64_t(seq[n]) * l.max_blocks;
  const int64_t last = pos[n];
  A m = -A(INFINITY), sum = 0;
  A acc[kMaxDims];
  for (int i = 0; i < kMaxDims; ++i) acc[i] = 0;
  for (int64_t start = 0; start <= last; start += kThreads) {
    const int64_t j = start + t;
    A s = -A(INFINITY);
    if (j <= last) {
      const int64_t slot =
          (int64_t(table[j / l.block_size]) * l.block_size + j % l.block_size) * l.Hkv + hk;
      const T* krow = k_cache + slot * l.D;
      A dot = 0;
      for (int64_t d = 0; d < l.D; ++d) dot += q_row[d] * load_acc(krow + d);
      s = dot * A(l.scale);
    }
    const A tile_max = block_reduce<A>(s, scratch, 0);
    const A m_new = m > tile_max ? m : tile_max;
    const A p = j <= last ? math_exp(s - m_new) : A(0);
    weights[t] = p;
    const A tile_sum = block_reduce<A>(p, scratch, 1);  // its barriers also publish weights
    const A c = math_exp(m - m_new);                    // 0 on the first tile (m = -inf)
    sum = sum * c + tile_sum;
    const int64_t keys = last - start + 1 < kThreads ? last - start + 1 : kThreads;
    for (int i = 0; i < kMaxDims; ++i) {
      const int64_t d = t + int64_t(i) * kThreads;
      if (d >= l.D) break;
      A a = acc[i] * c;
      for (int64_t k = 0; k < keys; ++k) {
        const int64_t jj = start + k;
        const int64_t slot =
            (int64_t(table[jj / l.block_size]) * l.block_size + jj % l.block_size) * l.Hkv + hk;
        a += weights[k] * load_acc(v_cache + slot * l.D + d);
      }
      acc[i] = a;
    }
    m = m_new;
    __syncthreads();  // weights are rewritten by the next tile
  }
  T* orow = out + (n * l.H + h) * l.D;
  for (int i = 0; i < kMaxDims; ++i) {
    const int64_t d = t + int64_t(i) * kThreads;
    if (d < l.D) orow[d] = convert<T>(acc[i] / sum);
  }
}

}  // namespace

void paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                     const Tensor& block_tables, const Tensor& token_seq, const Tensor& token_pos,
                     double scale, const Tensor& out, cudaStream_t stream) {
  const char* op = "paged_attention";
  TESSERA_CHECK(q.dim() == 3 && k_cache.dim() == 4 && v_cache.shape() == k_cache.shape() &&
                    k_cache.dtype() == q.dtype() && v_cache.dtype() == q.dtype() &&
                    out.shape() == q.shape() && out.dtype() == q.dtype() &&
                    is_floating(q.dtype()) && k_cache.size(3) == q.size(2) &&
                    q.size(1) % k_cache.size(2) == 0 && k_cache.is_contiguous() &&
                    v_cache.is_contiguous() && out.is_contiguous() &&
                    (q.size(2) <= 1 || q.stride(2) == 1) && block_tables.dim() == 2 &&
                    block_tables.dtype() == DType::i32 && token_seq.dtype() == DType::i32 &&
                    token_pos.dtype() == DType::i32 && block_tables.is_contiguous() &&
                    token_seq.is_contiguous() && token_pos.is_contiguous() &&
                    token_seq.numel() == q.size(0) && token_pos.numel() == q.size(0),
                "cuda ", op,
                ": needs q [N, H, D] (unit stride in D), contiguous caches [blocks, "
                "block_size, Hkv, D] of q's dtype with H % Hkv == 0, contiguous i32 tables and "
                "token indices, out like q; got q ",
                q.describe(), ", k_cache ", k_cache.describe(), ", block_tables ",
                block_tables.describe(), ", token_seq ", token_seq.describe());
  TESSERA_CHECK(q.size(2) <= kThreads * kMaxDims, "cuda ", op, ": head dimension ", q.size(2),
                " exceeds ", kThreads * kMaxDims);
  const int64_t N = q.size(0), H = q.size(1);
  if (N * H == 0) return;
  const PagedLayout l{
      H,           q.size(2), k_cache.size(1), k_cache.size(2), block_tables.size(1), q.stride(0),
      q.stride(1), scale};
  dispatch_device(q.dtype(), [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!std::is_integral_v<S>) {
      launch(paged_attention_kernel<S>,
             LaunchConfig{dim3(unsigned(N * H)), dim3(kThreads), 0, stream, op},
             static_cast<const S*>(q.data_ptr(op)), static_cast<const S*>(k_cache.data_ptr(op)),
             static_cast<const S*>(v_cache.data_ptr(op)),
             static_cast<const int32_t*>(block_tables.data_ptr(op)),
             static_cast<const int32_t*>(token_seq.data_ptr(op)),
             static_cast<const int32_t*>(token_pos.data_ptr(op)), static_cast<S*>(out.data_ptr(op)),
             l);
    }
  });
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
