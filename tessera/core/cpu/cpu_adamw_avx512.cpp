// The AVX-512F path of the CPU AdamW: 16 floats per step, the scalar formula of
// core/detail/adamw_coefficients.h op for op, as cpu_adamw_avx2.cpp does with 8 (see there for
// why each op gives the scalar's bits). Compiled with -ffp-contract=off.
//
// Memory bound: 28 bytes per element with an f32 gradient (p, g, m, v read; p, m, v written),
// also 28 with a bf16/f16 gradient and copy. Twice the lanes of AVX2 do not make the memory
// faster; they halve the instructions, which leaves the core more room when the data are in
// cache and on parts with a narrow divider.
//
// bf16 gradients widen exactly (a shift), f16 ones through vcvtph2ps (exact); the bf16/f16
// copies round to nearest even as core/half.h does, NaN included; the stochastic bf16 copy stays
// scalar, run on the chunk while it is in cache.

#include "tessera/core/cpu/cpu_adamw.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

// Per function rather than per file, so that inline functions from headers compiled here stay
// baseline code (a linker may keep any one copy of them) and never reach a CPU without AVX-512.
#define TESSERA_AVX512 __attribute__((target("avx512f")))

namespace tessera::cpu {

namespace {

struct Coefficients16 {
  __m512 grad_scale, b1, one_minus_b1, b2, one_minus_b2, neg_step_size, sqrt_bc2, eps, decay;
};

TESSERA_AVX512 Coefficients16 broadcast(const AdamCoefficients& c) {
  return {
      _mm512_set1_ps(c.grad_scale), _mm512_set1_ps(c.b1),           _mm512_set1_ps(c.one_minus_b1),
      _mm512_set1_ps(c.b2),         _mm512_set1_ps(c.one_minus_b2), _mm512_set1_ps(-c.step_size),
      _mm512_set1_ps(c.sqrt_bc2),   _mm512_set1_ps(c.eps),          _mm512_set1_ps(c.decay)};
}

TESSERA_AVX512 inline __m512 load_grad(const float* g) {
  return _mm512_loadu_ps(g);
}

TESSERA_AVX512 inline __m512 load_grad(const BFloat16* g) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

TESSERA_AVX512 inline __m512 load_grad(const Half* g) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(g)));
}

// adamw_update on 16 lanes; returns the new p.
TESSERA_AVX512 inline __m512 update16(float* p, __m512 g, float* m, float* v,
                                      const Coefficients16& k) {
  const __m512 gi = _mm512_mul_ps(g, k.grad_scale);
  const __m512 mi = _mm512_fmadd_ps(k.b1, _mm512_loadu_ps(m), _mm512_mul_ps(k.one_minus_b1, gi));
  const __m512 vi = _mm512_fmadd_ps(k.b2, _mm512_loadu_ps(v),
                                    _mm512_mul_ps(k.one_minus_b2, _mm512_mul_ps(gi, gi)));
  _mm512_storeu_ps(m, mi);
  _mm512_storeu_ps(v, vi);
  const __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), k.sqrt_bc2), k.eps);
  const __m512 pn = _mm512_fmadd_ps(k.neg_step_size, _mm512_div_ps(mi, denom),
                                    _mm512_mul_ps(_mm512_loadu_ps(p), k.decay));
  _mm512_storeu_ps(p, pn);
  return pn;
}

// Lanes holding a NaN (|bits| above infinity's).
TESSERA_AVX512 inline __mmask16 nan_lanes(__m512i u) {
  return _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                 _mm512_set1_epi32(0x7f800000));
}

// BFloat16::from_float on 16 lanes (see cpu_adamw_avx2.cpp).
TESSERA_AVX512 inline void store_bf16(uint16_t* out, __m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i high = _mm512_srli_epi32(u, 16);
  const __m512i bias =
      _mm512_add_epi32(_mm512_and_si512(high, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  const __m512i quiet = _mm512_or_si512(high, _mm512_set1_epi32(0x40));
  const __m512i r = _mm512_mask_blend_epi32(nan_lanes(u), rounded, quiet);
  // Each lane is at most 0xffff, so truncating to 16 bits only narrows.
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(r));
}

// Half::from_float on 16 lanes: a NaN lane becomes the float NaN that vcvtps2ph turns into
// Half's sign | 0x7e00 (see cpu_adamw_avx2.cpp).
TESSERA_AVX512 inline void store_f16(uint16_t* out, __m512 x) {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i canonical = _mm512_or_si512(
      _mm512_and_si512(u, _mm512_set1_epi32(int(0x80000000u))), _mm512_set1_epi32(0x7fc00000));
  const __m512 y = _mm512_mask_blend_ps(nan_lanes(u), x, _mm512_castsi512_ps(canonical));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      _mm512_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

template <class G, AdamCopy C>
TESSERA_AVX512 void chunk(const AdamArrays& a, int64_t first, int64_t n,
                          const AdamCoefficients& c) {
  float* p = a.p + first;
  const G* g = static_cast<const G*>(a.g) + first;
  float* m = a.m + first;
  float* v = a.v + first;
  uint16_t* out = C == AdamCopy::none ? nullptr : a.rounded + first;
  const Coefficients16 k = broadcast(c);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 pn = update16(p + i, load_grad(g + i), m + i, v + i, k);
    if constexpr (C == AdamCopy::bf16) store_bf16(out + i, pn);
    if constexpr (C == AdamCopy::f16) store_f16(out + i, pn);
  }
  // The tail (only the tensor's last chunk has one): the scalar formula itself.
  for (; i < n; ++i) {
    adamw_update(p[i], float(g[i]), m[i], v[i], c);
    if constexpr (C == AdamCopy::bf16) out[i] = BFloat16::from_float(p[i]);
    if constexpr (C == AdamCopy::f16) out[i] = Half::from_float(p[i]);
  }
  if constexpr (C == AdamCopy::bf16_stochastic) adamw_round_stochastic(a, first, n, c);
}

template <class G>
void chunk_for_copy(const AdamArrays& a, int64_t first, int64_t n, const AdamCoefficients& c) {
  switch (a.copy) {
    case AdamCopy::none:
      return chunk<G, AdamCopy::none>(a, first, n, c);
    case AdamCopy::bf16:
      return chunk<G, AdamCopy::bf16>(a, first, n, c);
    case AdamCopy::f16:
      return chunk<G, AdamCopy::f16>(a, first, n, c);
    case AdamCopy::bf16_stochastic:
      return chunk<G, AdamCopy::bf16_stochastic>(a, first, n, c);
  }
}

}  // namespace

void adamw_chunk_avx512(const AdamArrays& a, int64_t first, int64_t n, const AdamCoefficients& c) {
  switch (a.grad) {
    case AdamGrad::f32:
      return chunk_for_copy<float>(a, first, n, c);
    case AdamGrad::bf16:
      return chunk_for_copy<BFloat16>(a, first, n, c);
    case AdamGrad::f16:
      return chunk_for_copy<Half>(a, first, n, c);
  }
}

}  // namespace tessera::cpu

#else  // not x86: never available (cpu_adamw_dispatch.cpp), so never called.

namespace tessera::cpu {
void adamw_chunk_avx512(const AdamArrays& a, int64_t first, int64_t n, const AdamCoefficients& c) {
  adamw_chunk_scalar(a, first, n, c);
}
}  // namespace tessera::cpu

#endif
