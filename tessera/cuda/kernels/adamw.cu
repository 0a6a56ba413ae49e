// Fused AdamW (adamw.h): one streaming pass that reads param, grad, m, v and writes param, m, v,
// 28 bytes per element. Memory-bound: a sqrt and a divide per element hide behind the loads.
// A grid-stride loop over 16-byte vectors (4 floats of each array) when all four arrays are
// 16-byte aligned, then a scalar loop over the rest.
//
// Same formula and rounding order as the CPU backend (coefficients from the same host code,
// core/adamw_coefficients.h). Results agree to about one rounding per operation, not bit
// for bit: either compiler may contract a * b + c into an FMA (GCC does so in the CPU loop, as
// C++ allows by default; nvcc does here).

#include "tessera/cuda/kernels/adamw.h"

#include <cmath>

#include "tessera/core/adamw_coefficients.h"
#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void update(float& p, float g, float& m, float& v,
                                       const AdamCoefficients& c) {
  const float gi = g * c.grad_scale;
  const float mi = c.b1 * m + c.one_minus_b1 * gi;
  const float vi = c.b2 * v + c.one_minus_b2 * (gi * gi);
  m = mi;
  v = vi;
  // PyTorch's order: sqrt(v) / sqrt(bc2) + eps, then p * decay - step * (m / denom).
  const float denom = sqrtf(vi) / c.sqrt_bc2 + c.eps;
  p = p * c.decay - c.step_size * (mi / denom);
}

// vec_count float4 vectors over the aligned arrays, then elements [4 * vec_count, n) one by one.
__global__ void adamw_kernel(float* __restrict__ p, const float* __restrict__ g,
                             float* __restrict__ m, float* __restrict__ v, int64_t n,
                             int64_t vec_count, AdamCoefficients c) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = first; i < vec_count; i += stride) {
    float4 pv = reinterpret_cast<float4*>(p)[i];
    const float4 gv = reinterpret_cast<const float4*>(g)[i];
    float4 mv = reinterpret_cast<float4*>(m)[i];
    float4 vv = reinterpret_cast<float4*>(v)[i];
    update(pv.x, gv.x, mv.x, vv.x, c);
    update(pv.y, gv.y, mv.y, vv.y, c);
    update(pv.z, gv.z, mv.z, vv.z, c);
    update(pv.w, gv.w, mv.w, vv.w, c);
    reinterpret_cast<float4*>(p)[i] = pv;
    reinterpret_cast<float4*>(m)[i] = mv;
    reinterpret_cast<float4*>(v)[i] = vv;
  }
  for (int64_t i = 4 * vec_count + first; i < n; i += stride) update(p[i], g[i], m[i], v[i], c);
}

}  // namespace

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWArgs& args, cudaStream_t stream) {
  for (const Tensor* t : {&param, &grad, &m, &v})
    TESSERA_CHECK(t->dtype() == DType::f32 && t->is_contiguous() && t->numel() == param.numel(),
                  "adamw on cuda: param ", param.describe(), ", grad ", grad.describe(), ", m ",
                  m.describe(), " and v ", v.describe(),
                  " must be contiguous f32 tensors of one size");
  const int64_t n = param.numel();
  if (n == 0) return;
  const AdamCoefficients c = adamw_coefficients(args);

  float* pp = static_cast<float*>(param.data_ptr());
  const float* gp = static_cast<const float*>(grad.data_ptr());
  float* mp = static_cast<float*>(m.data_ptr());
  float* vp = static_cast<float*>(v.data_ptr());
  const bool vec = is_aligned16(pp) && is_aligned16(gp) && is_aligned16(mp) && is_aligned16(vp);
  const int64_t vec_count = vec ? n / 4 : 0;
  const int64_t work = vec ? vec_count + n % 4 : n;
  launch(adamw_kernel,
         LaunchConfig{dim3(grid_blocks(work, kThreads)), dim3(kThreads), 0, stream, "adamw"}, pp,
         gp, mp, vp, n, vec_count, c);
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
