// Fused AdamW (adamw.h): one streaming pass that reads param, grad, m, v and writes param, m, v,
// and optionally the updated param rounded into a bf16/f16 copy (mixed precision's compute
// weights). Bytes per element: 28 (f32 grad, no copy), 30 (f32 grad + copy), 28 (bf16/f16 grad
// + copy). Memory-bound: a sqrt, two divides and, with stochastic rounding, a quarter of a
// Philox call (ten 32-bit multiply rounds per four elements) hide behind the loads.
//
// Each thread of a grid-stride loop owns a group of four consecutive elements: 16-byte loads of
// param, m, v (8 bytes of a 16-bit grad, 8-byte store of the copy) when every array is aligned
// and the group is whole, scalar accesses otherwise (the ragged tail, misaligned views). A group
// is exactly one Philox block, so stochastic rounding costs one Philox call per thread.
//
// Bit-identical to the CPU backend: the per-element arithmetic and rounding are the shared
// host/device functions of core/detail/adamw_coefficients.h (explicit FMAs, correctly rounded sqrt and
// divide; bf16/f16 rounding in integer arithmetic), and the random bits are Philox at (key of
// (seed, step), element index), as on the CPU.

#include "tessera/cuda/kernels/adamw.h"

#include <type_traits>

#include "tessera/core/detail/adamw_coefficients.h"
#include "tessera/core/detail/philox.h"
#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kThreads = 256;

// What the kernel writes besides param, m, v.
enum class Copy { none, bf16, bf16_stochastic, f16 };

template <Copy kCopy>
__device__ __forceinline__ uint16_t round_copy(float x, uint32_t bits) {
  if constexpr (kCopy == Copy::bf16_stochastic) {
    return bf16_round_stochastic(x, bits);
  } else if constexpr (kCopy == Copy::bf16) {
    return BFloat16::from_float(x);
  } else {
    return Half::from_float(x);
  }
}

// Four gradient values from a 16-byte (f32) or 8-byte (bf16, f16) aligned address.
template <class G>
__device__ __forceinline__ void load_grad4(const G* g, float (&out)[4]) {
  if constexpr (std::is_same_v<G, float>) {
    const float4 r = *reinterpret_cast<const float4*>(g);
    out[0] = r.x, out[1] = r.y, out[2] = r.z, out[3] = r.w;
  } else {
    const uint2 raw = *reinterpret_cast<const uint2*>(g);
    G pack[4];
    memcpy(static_cast<void*>(pack), &raw, sizeof(raw));
    for (int j = 0; j < 4; ++j) out[j] = convert<float>(pack[j]);
  }
}

__device__ __forceinline__ void load4(const float* a, float (&out)[4]) {
  const float4 r = *reinterpret_cast<const float4*>(a);
  out[0] = r.x, out[1] = r.y, out[2] = r.z, out[3] = r.w;
}

__device__ __forceinline__ void store4(float* a, const float (&in)[4]) {
  *reinterpret_cast<float4*>(a) = make_float4(in[0], in[1], in[2], in[3]);
}

// Groups of four elements: group k is elements [4k, 4k + 4) of n, and Philox block k of the
// step's rounding key. vec: every array is aligned for the group-wide accesses.
template <class G, Copy kCopy>
__global__ void adamw_kernel(float* __restrict__ p, const G* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, uint16_t* __restrict__ copy, int64_t n,
                             bool vec, AdamCoefficients c) {
  const int64_t groups = (n + 3) / 4;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < groups;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = 4 * k;
    const int count = n - base < 4 ? int(n - base) : 4;
    const bool whole = vec && count == 4;
    float pv[4] = {}, gv[4] = {}, mv[4] = {}, vv[4] = {};
    if (whole) {
      load4(p + base, pv);
      load_grad4(g + base, gv);
      load4(m + base, mv);
      load4(v + base, vv);
    } else {
      // A guard in a loop of constant trip count (not a loop to count): nvcc unrolls it, so
      // the arrays stay in registers.
      for (int j = 0; j < 4; ++j) {
        if (j < count) {
          pv[j] = p[base + j];
          gv[j] = convert<float>(g[base + j]);
          mv[j] = m[base + j];
          vv[j] = v[base + j];
        }
      }
    }
    for (int j = 0; j < 4; ++j) adamw_update(pv[j], gv[j], mv[j], vv[j], c);
    if (whole) {
      store4(p + base, pv);
      store4(m + base, mv);
      store4(v + base, vv);
    } else {
      for (int j = 0; j < 4; ++j) {
        if (j < count) {
          p[base + j] = pv[j];
          m[base + j] = mv[j];
          v[base + j] = vv[j];
        }
      }
    }
    if constexpr (kCopy != Copy::none) {
      philox::Block bits = {};
      if constexpr (kCopy == Copy::bf16_stochastic)
        bits = philox::philox4x32(uint64_t(k), c.round_key);
      uint16_t out[4];
      for (int j = 0; j < 4; ++j) out[j] = round_copy<kCopy>(pv[j], bits.v[j]);
      if (whole) {
        *reinterpret_cast<uint2*>(copy + base) = make_uint2(
            uint32_t(out[0]) | uint32_t(out[1]) << 16, uint32_t(out[2]) | uint32_t(out[3]) << 16);
      } else {
        for (int j = 0; j < 4; ++j)
          if (j < count) copy[base + j] = out[j];
      }
    }
  }
}

bool aligned(const void* ptr, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(ptr) & (bytes - 1)) == 0;
}

template <class G, Copy kCopy>
void launch_adamw(float* p, const G* g, float* m, float* v, uint16_t* copy, int64_t n,
                  const AdamCoefficients& c, cudaStream_t stream) {
  const bool vec = is_aligned16(p) && is_aligned16(m) && is_aligned16(v) &&
                   aligned(g, 4 * sizeof(G)) && (copy == nullptr || aligned(copy, 8));
  const int64_t groups = (n + 3) / 4;
  launch(adamw_kernel<G, kCopy>,
         LaunchConfig{dim3(grid_blocks(groups, kThreads)), dim3(kThreads), 0, stream, "adamw"}, p,
         g, m, v, copy, n, vec, c);
}

template <class G>
void adamw_with_grad(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                     const Tensor& rounded, const AdamWArgs& args, cudaStream_t stream) {
  const AdamCoefficients c = adamw_coefficients(args);
  float* pp = static_cast<float*>(param.data_ptr("adamw"));
  const G* gp = static_cast<const G*>(grad.data_ptr("adamw"));
  float* mp = static_cast<float*>(m.data_ptr("adamw"));
  float* vp = static_cast<float*>(v.data_ptr("adamw"));
  const int64_t n = param.numel();
  if (!rounded.defined()) return launch_adamw<G, Copy::none>(pp, gp, mp, vp, nullptr, n, c, stream);
  uint16_t* out = static_cast<uint16_t*>(rounded.data_ptr("adamw"));
  if (rounded.dtype() == DType::f16)
    return launch_adamw<G, Copy::f16>(pp, gp, mp, vp, out, n, c, stream);
  if (args.stochastic_rounding)
    return launch_adamw<G, Copy::bf16_stochastic>(pp, gp, mp, vp, out, n, c, stream);
  launch_adamw<G, Copy::bf16>(pp, gp, mp, vp, out, n, c, stream);
}

}  // namespace

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                const Tensor& rounded, const AdamWArgs& args, cudaStream_t stream) {
  const int64_t n = param.numel();
  const auto describe_all = [&] {
    return str_cat("param ", param.describe(), ", grad ", grad.describe(), ", m ", m.describe(),
                   ", v ", v.describe(), ", rounded ",
                   rounded.defined() ? rounded.describe() : std::string("none"));
  };
  for (const Tensor* t : {&param, &grad, &m, &v})
    TESSERA_CHECK(t->is_contiguous() && t->numel() == n, "adamw on cuda: ", describe_all(),
                  ": needs contiguous tensors of one size");
  const DType gd = grad.dtype();
  TESSERA_CHECK(param.dtype() == DType::f32 && m.dtype() == DType::f32 && v.dtype() == DType::f32 &&
                    (gd == DType::f32 || gd == DType::bf16 || gd == DType::f16),
                "adamw on cuda: ", describe_all(),
                ": needs f32 param, m, v and an f32, bf16 or f16 grad");
  TESSERA_CHECK(
      !rounded.defined() || ((rounded.dtype() == DType::bf16 || rounded.dtype() == DType::f16) &&
                             rounded.is_contiguous() && rounded.numel() == n),
      "adamw on cuda: ", describe_all(),
      ": the rounded copy must be a contiguous bf16 or f16 tensor of param's size");
  TESSERA_CHECK(!args.stochastic_rounding || (rounded.defined() && rounded.dtype() == DType::bf16),
                "adamw on cuda: ", describe_all(),
                ": stochastic rounding writes a bf16 copy of param");
  if (n == 0) return;
  if (gd == DType::bf16)
    return adamw_with_grad<__nv_bfloat16>(param, grad, m, v, rounded, args, stream);
  if (gd == DType::f16) return adamw_with_grad<__half>(param, grad, m, v, rounded, args, stream);
  adamw_with_grad<float>(param, grad, m, v, rounded, args, stream);
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
