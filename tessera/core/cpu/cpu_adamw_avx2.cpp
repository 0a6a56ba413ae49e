// The AVX2+FMA path of the CPU AdamW: 8 floats per step, the scalar formula of
// core/detail/adamw_coefficients.h op for op. Each vector op is the correctly rounded op the scalar
// spells out (_mm256_fmadd_ps for fmaf, mul, add, sqrt, div), in the same order, so every lane
// gets the scalar's bits; the file is compiled with -ffp-contract=off so the compiler cannot fuse
// a mul into a later add either.
//
// Memory bound: 28 bytes per element with an f32 gradient (p, g, m, v read; p, m, v written),
// also 28 with a bf16/f16 gradient and copy. Per 8 elements the core does 2 divides and a sqrt,
// some 15-20 cycles of divider throughput on recent cores: about the time 224 bytes take at one
// core's share of the memory bandwidth, so the loop runs near the memory's pace (bench_adamw).
//
// bf16 gradients widen exactly (a shift); f16 ones go through F16C's vcvtph2ps, exact too (an
// f16 signalling NaN comes out quieted, which the scalar's first multiply does anyway). The
// bf16/f16 copies round to nearest even as core/half.h does, NaN included; the stochastic bf16
// copy stays scalar (one Philox block per four elements), run on the chunk while it is in cache.

#include "tessera/core/cpu/cpu_adamw.h"

#if defined(__x86_64__) && defined(__GNUC__)

#include <immintrin.h>

// Per function rather than per file, so that inline functions from headers compiled here stay
// baseline code (a linker may keep any one copy of them).
#define TESSERA_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace tessera::cpu {

namespace {

struct Coefficients8 {
  __m256 grad_scale, b1, one_minus_b1, b2, one_minus_b2, neg_step_size, sqrt_bc2, eps, decay;
};

TESSERA_AVX2 Coefficients8 broadcast(const AdamCoefficients& c) {
  return {
      _mm256_set1_ps(c.grad_scale), _mm256_set1_ps(c.b1),           _mm256_set1_ps(c.one_minus_b1),
      _mm256_set1_ps(c.b2),         _mm256_set1_ps(c.one_minus_b2), _mm256_set1_ps(-c.step_size),
      _mm256_set1_ps(c.sqrt_bc2),   _mm256_set1_ps(c.eps),          _mm256_set1_ps(c.decay)};
}

TESSERA_AVX2 inline __m256 load_grad(const float* g) {
  return _mm256_loadu_ps(g);
}

TESSERA_AVX2 inline __m256 load_grad(const BFloat16* g) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

TESSERA_AVX2 inline __m256 load_grad(const Half* g) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g)));
}

// adamw_update on 8 lanes; returns the new p.
TESSERA_AVX2 inline __m256 update8(float* p, __m256 g, float* m, float* v, const Coefficients8& k) {
  const __m256 gi = _mm256_mul_ps(g, k.grad_scale);
  const __m256 mi = _mm256_fmadd_ps(k.b1, _mm256_loadu_ps(m), _mm256_mul_ps(k.one_minus_b1, gi));
  const __m256 vi = _mm256_fmadd_ps(k.b2, _mm256_loadu_ps(v),
                                    _mm256_mul_ps(k.one_minus_b2, _mm256_mul_ps(gi, gi)));
  _mm256_storeu_ps(m, mi);
  _mm256_storeu_ps(v, vi);
  const __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), k.sqrt_bc2), k.eps);
  const __m256 pn = _mm256_fmadd_ps(k.neg_step_size, _mm256_div_ps(mi, denom),
                                    _mm256_mul_ps(_mm256_loadu_ps(p), k.decay));
  _mm256_storeu_ps(p, pn);
  return pn;
}

// Lanes holding a NaN (|bits| above infinity's).
TESSERA_AVX2 inline __m256i nan_lanes(__m256i u) {
  return _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                            _mm256_set1_epi32(0x7f800000));
}

// BFloat16::from_float on 8 lanes: add 0x7fff plus the kept lsb, keep the high half; a NaN
// keeps its high half with the quiet bit set.
TESSERA_AVX2 inline void store_bf16(uint16_t* out, __m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i high = _mm256_srli_epi32(u, 16);
  const __m256i bias =
      _mm256_add_epi32(_mm256_and_si256(high, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7fff));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
  const __m256i quiet = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
  const __m256i r = _mm256_blendv_epi8(rounded, quiet, nan_lanes(u));
  // Each lane is at most 0xffff, so the saturating pack only narrows.
  const __m128i packed =
      _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), packed);
}

// Half::from_float on 8 lanes: vcvtps2ph rounds to nearest even with the same overflow and
// subnormal results; only NaN differs (it keeps payload bits, Half gives sign | 0x7e00), so a
// NaN lane is replaced first by the float NaN that converts to exactly that.
TESSERA_AVX2 inline void store_f16(uint16_t* out, __m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i canonical = _mm256_or_si256(
      _mm256_and_si256(u, _mm256_set1_epi32(int(0x80000000u))), _mm256_set1_epi32(0x7fc00000));
  const __m256 y =
      _mm256_blendv_ps(x, _mm256_castsi256_ps(canonical), _mm256_castsi256_ps(nan_lanes(u)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_cvtps_ph(y, _MM_FROUND_TO_NEAREST_INT));
}

template <class G, AdamCopy C>
TESSERA_AVX2 void chunk(const AdamArrays& a, int64_t first, int64_t n, const AdamCoefficients& c) {
  float* p = a.p + first;
  const G* g = static_cast<const G*>(a.g) + first;
  float* m = a.m + first;
  float* v = a.v + first;
  uint16_t* out = C == AdamCopy::none ? nullptr : a.rounded + first;
  const Coefficients8 k = broadcast(c);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 pn = update8(p + i, load_grad(g + i), m + i, v + i, k);
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

void adamw_chunk_avx2(const AdamArrays& a, int64_t first, int64_t n, const AdamCoefficients& c) {
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
void adamw_chunk_avx2(const AdamArrays& a, int64_t first, int64_t n, const AdamCoefficients& c) {
  adamw_chunk_scalar(a, first, n, c);
}
}  // namespace tessera::cpu

#endif
