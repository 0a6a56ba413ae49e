// The scalar reference of the CPU AdamW. Built with -fno-tree-vectorize -ffp-contract=off
// (tests/CMakeLists.txt, bench/CMakeLists.txt): one element at a time, each multiply-add an
// explicit fmaf, every other op rounded on its own. It shares only the per-step coefficients
// (adamw_coefficients), the f16 conversions of core/half.h (their definition) and Philox with
// the kernel; the update and the bf16 roundings are spelled out here again.
//
//   gi = g * grad_scale
//   m  = fmaf(b1, m, (1 - b1) * gi);   v = fmaf(b2, v, (1 - b2) * (gi * gi))
//   p  = fmaf(-step_size, m / (sqrtf(v) / sqrt_bc2 + eps), p * decay)

#include "tests/core/adamw_scalar_reference.h"

#include <cmath>
#include <cstring>

namespace tessera::testing {

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float widen(const float* g, int64_t i) {
  return g[i];
}
float widen(const BFloat16* g, int64_t i) {
  return from_bits(uint32_t(g[i].bits) << 16);
}
float widen(const Half* g, int64_t i) {
  return Half::to_float(g[i].bits);
}

bool is_nan_bits(uint32_t u) {
  return (u & 0x7fffffffu) > 0x7f800000u;
}

// Round to nearest even; a NaN keeps its top half, quieted.
uint16_t bf16_nearest(float x) {
  const uint32_t u = to_bits(x);
  if (is_nan_bits(u)) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Up in magnitude with probability (the dropped 16 bits) / 2^16.
uint16_t bf16_stochastic(float x, uint32_t random) {
  const uint32_t u = to_bits(x);
  if (is_nan_bits(u)) return uint16_t((u >> 16) | 0x40u);
  return uint16_t((u + (random & 0xffffu)) >> 16);
}

template <class G>
void update(const cpu::AdamArrays& a, int64_t first, int64_t n, const AdamCoefficients& c) {
  const G* g = static_cast<const G*>(a.g);
  for (int64_t i = first; i < first + n; ++i) {
    const float gi = widen(g, i) * c.grad_scale;
    const float mi = std::fmaf(c.b1, a.m[i], c.one_minus_b1 * gi);
    const float gg = gi * gi;
    const float vi = std::fmaf(c.b2, a.v[i], c.one_minus_b2 * gg);
    a.m[i] = mi;
    a.v[i] = vi;
    const float root = std::sqrt(vi);
    const float denom = root / c.sqrt_bc2 + c.eps;
    const float ratio = mi / denom;
    const float decayed = a.p[i] * c.decay;
    const float p = std::fmaf(-c.step_size, ratio, decayed);
    a.p[i] = p;
    switch (a.copy) {
      case cpu::AdamCopy::none:
        break;
      case cpu::AdamCopy::bf16:
        a.rounded[i] = bf16_nearest(p);
        break;
      case cpu::AdamCopy::f16:
        a.rounded[i] = Half::from_float(p);
        break;
      case cpu::AdamCopy::bf16_stochastic: {
        // Element i takes word i % 4 of Philox block i / 4 under this step's key.
        const philox::Block bits = philox::philox4x32(uint64_t(i) / 4, c.round_key);
        a.rounded[i] = bf16_stochastic(p, bits.v[i % 4]);
        break;
      }
    }
  }
}

}  // namespace

void adamw_scalar_reference(const cpu::AdamArrays& a, int64_t first, int64_t n,
                            const AdamCoefficients& c) {
  switch (a.grad) {
    case cpu::AdamGrad::f32:
      return update<float>(a, first, n, c);
    case cpu::AdamGrad::bf16:
      return update<BFloat16>(a, first, n, c);
    case cpu::AdamGrad::f16:
      return update<Half>(a, first, n, c);
  }
}

}  // namespace tessera::testing
