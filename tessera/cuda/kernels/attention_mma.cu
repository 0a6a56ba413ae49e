// The tensor-core forward pass of causal flash attention for bf16 and f16 inputs
// (attention_forward_mma in attention.h; attention_forward takes it for 16-bit inputs).
//
// FlashAttention-2 on mma.m16n8k16 (f32 accumulators): a block of 4 warps owns 64 queries,
// each warp 16 of them, whose Q fragments stay in registers. K and V tiles of 64 keys stream
// through shared memory (raw 16-bit values, zero-padded to Dp = D rounded up to 16). Per tile a
// warp forms S = Q K^T (8 n-tiles of 8 keys, Dp / 16 k-steps each), masks and scales it, updates
// the running row max m and per-lane partial sums l (lanes of a row share its max through two
// xor shuffles), and multiplies P V: the S accumulator fragments of two adjacent n-tiles are
// exactly an A fragment of the next mma (PTX fragment layouts), so P goes from registers to the
// tensor cores rounded to the input type, never through memory.
//
// Precision: the products Q K^T and P V accumulate in f32; P is rounded to bf16/f16 (relative
// error 2^-9 / 2^-12) before P V, as in FlashAttention. lse comes from the unrounded f32 P.
//
// Bound: compute (tensor cores) at D = 64 and T >= 512: 4 Tq Tk D FLOPs per head, half masked.
// Fragments are gathered from shared memory with 32-bit loads (no ldmatrix), so shared-memory
// bandwidth limits it below the tensor-core peak.

#include <cmath>
#include <type_traits>

#include "tessera/cuda/kernels/attention.h"
#include "tessera/cuda/kernels/attention_heads.h"
#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kWarps = 4;
constexpr int kRows = 16 * kWarps;  // queries per block
constexpr int kKeys = 64;           // keys per shared-memory tile
constexpr int kNT = kKeys / 8;      // n-tiles of S per key tile

template <class T>
__device__ __forceinline__ uint32_t pack2(T lo, T hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return pack_bf16x2(lo, hi);
  } else {
    return pack_f16x2(lo, hi);
  }
}

template <class T>
__device__ __forceinline__ void mma(float (&acc)[4], const uint32_t (&a)[4],
                                    const uint32_t (&b)[2]) {
  float d[4];
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    mma_m16n8k16_bf16(d, a, b, acc);
  } else {
    mma_m16n8k16_f16(d, a, b, acc);
  }
  for (int i = 0; i < 4; ++i) acc[i] = d[i];
}

// The packed pair (tile[r0 * Dp + c0], tile[r1 * Dp + c1]) of a shared tile.
template <class T>
__device__ __forceinline__ uint32_t pair(SharedPtr<T> tile, int a, int b) {
  return pack2<T>(T(tile[a]), T(tile[b]));
}

template <class T, int KD>
__global__ void __launch_bounds__(kWarps * 32)
    attention_forward_mma_kernel(Heads<const T> q, Heads<const T> k, Heads<const T> v, Heads<T> o,
                                 int64_t H, int64_t group, int64_t Tq, int64_t Tk, int D,
                                 float scale, float* __restrict__ lse) {
  using L = MmaLayout;
  constexpr int Dp = 16 * KD, kDT = Dp / 8;
  TESSERA_DYNAMIC_SHARED(T, smem);                // K tile [kKeys, Dp], then V tile [kKeys, Dp]
  const int64_t qb = gridDim.x - 1 - blockIdx.x;  // the longest (last) query tiles first
  const int64_t bh = blockIdx.y, b = bh / H, h = bh % H, hk = h / group;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int gr = L::group(lane);
  const int64_t shift = Tk - Tq, row0 = qb * kRows + warp * 16;
  // This lane's two rows: row0 + gr (fragment elements 0, 1) and row0 + gr + 8 (2, 3).
  const int64_t pos[2] = {shift + row0 + gr, shift + row0 + gr + 8};

  uint32_t qa[KD][4];
  for (int kd = 0; kd < KD; ++kd)
    for (int r = 0; r < 4; ++r) {
      T e[2];
      for (int x = 0; x < 2; ++x) {
        const int64_t row = row0 + L::a_row(lane, 2 * r + x);
        const int col = kd * 16 + L::a_col(lane, 2 * r + x);
        e[x] = row < Tq && col < D ? q.row(b, h, row)[col] : convert<T>(0.0f);
      }
      qa[kd][r] = pack2<T>(e[0], e[1]);
    }
  float acc[kDT][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  const int64_t block_last = shift + (Tq < (qb + 1) * kRows ? Tq : (qb + 1) * kRows) - 1;
  for (int64_t j0 = 0; j0 <= block_last; j0 += kKeys) {
    const int64_t nk = Tk - j0 < kKeys ? Tk - j0 : kKeys;
    __syncthreads();  // every warp is done with the previous tile
    for (int idx = int(threadIdx.x); idx < 2 * kKeys * Dp; idx += int(blockDim.x)) {
      const int which = idx / (kKeys * Dp), r = idx / Dp % kKeys, d = idx % Dp;
      const bool inside = r < nk && d < D;
      smem[idx] = !inside      ? convert<T>(0.0f)
                  : which == 0 ? k.row(b, hk, j0 + r)[d]
                               : v.row(b, hk, j0 + r)[d];
    }
    __syncthreads();
    if (j0 > shift + row0 + 15) continue;  // the tile is in the future of all 16 rows

    float s[kNT][4];
    for (int nt = 0; nt < kNT; ++nt) {
      for (int i = 0; i < 4; ++i) s[nt][i] = 0.0f;
      const int key = nt * 8 + L::b_col(lane, 0);
      for (int kd = 0; kd < KD; ++kd) {
        const int d0 = kd * 16 + L::b_row(lane, 0), d2 = kd * 16 + L::b_row(lane, 2);
        const uint32_t kb[2] = {pair<T>(smem, key * Dp + d0, key * Dp + d0 + 1),
                                pair<T>(smem, key * Dp + d2, key * Dp + d2 + 1)};
        mma<T>(s[nt], qa[kd], kb);
      }
    }
    float tile_max[2] = {-INFINITY, -INFINITY};
    for (int nt = 0; nt < kNT; ++nt)
      for (int i = 0; i < 4; ++i) {
        const int64_t key = j0 + nt * 8 + L::c_col(lane, i);
        const int half = i / 2;
        s[nt][i] = key < j0 + nk && key <= pos[half] ? s[nt][i] * scale : -INFINITY;
        tile_max[half] = fmaxf(tile_max[half], s[nt][i]);
      }
    float alpha[2], base[2];
    for (int half = 0; half < 2; ++half) {
      float mx = tile_max[half];
      mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
      const float m_new = fmaxf(m[half], mx);
      // A row that has seen no key yet keeps alpha 1 and p 0 (no exp(-inf + inf)).
      base[half] = m_new == -INFINITY ? 0.0f : m_new;
      alpha[half] = expf(m[half] - base[half]);
      m[half] = m_new;
    }
    float psum[2] = {0.0f, 0.0f};
    for (int nt = 0; nt < kNT; ++nt)
      for (int i = 0; i < 4; ++i) {
        s[nt][i] = expf(s[nt][i] - base[i / 2]);
        psum[i / 2] += s[nt][i];
      }
    for (int half = 0; half < 2; ++half) l[half] = l[half] * alpha[half] + psum[half];
    for (int dt = 0; dt < kDT; ++dt)
      for (int i = 0; i < 4; ++i) acc[dt][i] *= alpha[i / 2];

    for (int kc = 0; kc < kKeys / 16; ++kc) {
      const uint32_t pa[4] = {pack2<T>(convert<T>(s[2 * kc][0]), convert<T>(s[2 * kc][1])),
                              pack2<T>(convert<T>(s[2 * kc][2]), convert<T>(s[2 * kc][3])),
                              pack2<T>(convert<T>(s[2 * kc + 1][0]), convert<T>(s[2 * kc + 1][1])),
                              pack2<T>(convert<T>(s[2 * kc + 1][2]), convert<T>(s[2 * kc + 1][3]))};
      const int k0 = kc * 16 + L::b_row(lane, 0), k2 = kc * 16 + L::b_row(lane, 2);
      for (int dt = 0; dt < kDT; ++dt) {
        const int d = kKeys * Dp + dt * 8 + L::b_col(lane, 0);
        const uint32_t vb[2] = {pair<T>(smem, d + k0 * Dp, d + (k0 + 1) * Dp),
                                pair<T>(smem, d + k2 * Dp, d + (k2 + 1) * Dp)};
        mma<T>(acc[dt], pa, vb);
      }
    }
  }

  for (int half = 0; half < 2; ++half) {
    l[half] += __shfl_xor_sync(kFullMask, l[half], 1);
    l[half] += __shfl_xor_sync(kFullMask, l[half], 2);
  }
  for (int dt = 0; dt < kDT; ++dt)
    for (int i = 0; i < 4; ++i) {
      const int64_t row = row0 + L::c_row(lane, i);
      const int col = dt * 8 + L::c_col(lane, i);
      if (row < Tq && col < D) o.row(b, h, row)[col] = convert<T>(acc[dt][i] * (1.0f / l[i / 2]));
    }
  if (L::thread_in_group(lane) == 0)
    for (int half = 0; half < 2; ++half) {
      const int64_t row = row0 + gr + 8 * half;
      if (row < Tq) lse[bh * Tq + row] = m[half] + logf(l[half]);
    }
}

template <class T, int KD>
void launch_mma(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& out,
                const Tensor& lse, cudaStream_t stream) {
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), Tk = k.size(2);
  const size_t shared = size_t(2 * kKeys * 16 * KD) * sizeof(T);
  const dim3 grid(unsigned((Tq + kRows - 1) / kRows), unsigned(B * H));
  launch(attention_forward_mma_kernel<T, KD>,
         LaunchConfig{grid, dim3(kWarps * 32), shared, stream, "attention (tensor cores)"},
         heads<const T>(q), heads<const T>(k), heads<const T>(v), heads<T>(out), H, H / Hkv, Tq, Tk,
         int(D), float(scale), static_cast<float*>(lse.data_ptr()));
}

}  // namespace

void attention_forward_mma(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                           const Tensor& out, const Tensor& lse, cudaStream_t stream) {
  const DType d = q.dtype();
  TESSERA_CHECK(d == DType::bf16 || d == DType::f16, "attention (tensor cores) on cuda: q ",
                q.describe(), " must be bf16 or f16");
  TESSERA_CHECK(q.size(3) <= 128, "attention (tensor cores) on cuda: head dim ", q.size(3),
                " of q ", q.describe(), " is over the supported maximum of 128");
  if (q.size(0) * q.size(1) * q.size(2) == 0) return;
  auto run = [&]<class T>(T*) {
    const int64_t D = q.size(3);
    if (D <= 16) {
      launch_mma<T, 1>(q, k, v, scale, out, lse, stream);
    } else if (D <= 32) {
      launch_mma<T, 2>(q, k, v, scale, out, lse, stream);
    } else if (D <= 64) {
      launch_mma<T, 4>(q, k, v, scale, out, lse, stream);
    } else {
      launch_mma<T, 8>(q, k, v, scale, out, lse, stream);
    }
  };
  if (d == DType::bf16) {
    run(static_cast<__nv_bfloat16*>(nullptr));
  } else {
    run(static_cast<__half*>(nullptr));
  }
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
