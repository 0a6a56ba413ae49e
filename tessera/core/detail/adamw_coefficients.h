#pragma once
// The fused AdamW update shared by every backend's kernel (CPU and CUDA): the per-step scalars,
// formed once on the host, and the per-element arithmetic and rounding, compiled for host and
// device alike, so both backends produce the same bits.
//
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   p = p (1 - lr wd) - step_size m / (sqrt(v) / sqrt_bc2 + eps)
//
// Bit-identity needs every rounding spelled out: C++ and CUDA both let a compiler contract
// a * b + c into one FMA (GCC and nvcc do by default), and each might pick a different pair. So
// each multiply-add is an explicit fmaf, whose operands are themselves single roundings that no
// compiler can fuse further; sqrtf and the divisions are correctly rounded on both (nvcc's
// defaults -prec-sqrt=true -prec-div=true; this project never builds with fast math).

#include <cmath>
#include <cstdint>

#include "tessera/core/backend.h"
#include "tessera/core/half.h"
#include "tessera/core/detail/philox.h"

namespace tessera {

struct AdamCoefficients {
  float decay;  // 1 - lr * weight_decay
  float b1, one_minus_b1, b2, one_minus_b2;
  float step_size;  // lr / (1 - beta1^t)
  float sqrt_bc2;   // sqrt(1 - beta2^t)
  float eps, grad_scale;
  // Philox key of this step's stochastic rounding; element i rounds with the low 16 bits of
  // stream position i under it.
  uint64_t round_key;
};

// The Philox key of stochastic rounding at (seed, step): the first 64 bits of Philox at counter
// `step` under key `seed`, so distinct steps (and seeds) give unrelated streams.
inline uint64_t rounding_key(uint64_t seed, int64_t step) {
  const philox::Block b = philox::philox4x32(uint64_t(step), seed);
  return uint64_t(b.v[0]) | (uint64_t(b.v[1]) << 32);
}

// Bias corrections in double: beta2^t for t in the hundreds of thousands underflows gracefully
// to 0 there, and 1 - beta^t keeps its digits for small t.
inline AdamCoefficients adamw_coefficients(const AdamWArgs& args) {
  const double t = double(args.step);
  const double bc1 = 1.0 - std::pow(double(args.beta1), t);
  const double bc2 = 1.0 - std::pow(double(args.beta2), t);
  AdamCoefficients c;
  c.decay = float(1.0 - double(args.lr) * double(args.weight_decay));
  c.b1 = args.beta1;
  c.one_minus_b1 = float(1.0 - double(args.beta1));
  c.b2 = args.beta2;
  c.one_minus_b2 = float(1.0 - double(args.beta2));
  c.step_size = float(double(args.lr) / bc1);
  c.sqrt_bc2 = float(std::sqrt(bc2));
  c.eps = args.eps;
  c.grad_scale = args.grad_scale;
  c.round_key = args.stochastic_rounding ? rounding_key(args.rounding_seed, args.step) : 0;
  return c;
}

// One element's update, in place. PyTorch's order: sqrt(v) / sqrt(bc2) + eps, then
// p * decay - step_size * (m / denom).
TESSERA_HD inline void adamw_update(float& p, float g, float& m, float& v,
                                    const AdamCoefficients& c) {
  const float gi = g * c.grad_scale;
  const float mi = ::fmaf(c.b1, m, c.one_minus_b1 * gi);
  const float vi = ::fmaf(c.b2, v, c.one_minus_b2 * (gi * gi));
  m = mi;
  v = vi;
  const float denom = ::sqrtf(vi) / c.sqrt_bc2 + c.eps;
  p = ::fmaf(-c.step_size, mi / denom, p * c.decay);
}

// x rounded to bf16 stochastically: up (in magnitude) with probability (the 16 bits bf16 drops)
// / 2^16, so the expected value is x. `bits` supplies the 16 random bits (its low half). NaN
// stays a quiet NaN as in round-to-nearest; values past bf16's largest may round to infinity
// with that same probability.
TESSERA_HD inline uint16_t bf16_round_stochastic(float x, uint32_t bits) {
  const uint32_t u = float_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  return uint16_t((u + (bits & 0xffffu)) >> 16);
}

}  // namespace tessera
