// Fused AdamW (decoupled weight decay, as PyTorch's AdamW): one streaming pass that reads
// param, grad, m, v and writes param, m, v, 28 bytes per element. Memory-bound: the arithmetic
// (a sqrt and a divide per element) vectorises and hides behind the loads. Elementwise, so
// the result does not depend on how the range is split across threads.

#include <cmath>

#include "tessera/core/adamw_coefficients.h"
#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/parallel.h"

namespace tessera {

namespace {

// Elements per task: 4 arrays x 16 KiB, so a task's working set stays in L2.
constexpr int64_t kAdamChunk = 1 << 12;

// The inner loop: restrict pointers and no branches, so the compiler vectorises it.
void adamw_span(float* __restrict p, const float* __restrict g, float* __restrict m,
                float* __restrict v, int64_t n, const AdamCoefficients& c) {
  for (int64_t i = 0; i < n; ++i) {
    float gi = g[i] * c.grad_scale;
    float mi = c.b1 * m[i] + c.one_minus_b1 * gi;
    float vi = c.b2 * v[i] + c.one_minus_b2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    // Rounded in PyTorch's order: sqrt(v) / sqrt(bc2) + eps, then p * decay - step * (m / denom).
    float denom = std::sqrt(vi) / c.sqrt_bc2 + c.eps;
    p[i] = p[i] * c.decay - c.step_size * (mi / denom);
  }
}

}  // namespace

void CpuBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                            const Tensor& v, const AdamWArgs& args) {
  TESSERA_ASSERT(param.is_contiguous() && grad.is_contiguous() && m.is_contiguous() &&
                 v.is_contiguous());
  const AdamCoefficients c = adamw_coefficients(args);

  float* p = param.data<float>("adamw");
  const float* g = grad.data<float>("adamw");
  float* mp = m.data<float>("adamw");
  float* vp = v.data<float>("adamw");
  const int64_t n = param.numel();
  const int64_t chunks = (n + kAdamChunk - 1) / kAdamChunk;
  cpu::parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
    int64_t begin = b * kAdamChunk, end = std::min(n, e * kAdamChunk);
    adamw_span(p + begin, g + begin, mp + begin, vp + begin, end - begin, c);
  });
}

}  // namespace tessera
