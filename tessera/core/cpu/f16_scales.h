#pragma once
// Q8_0 block scales (f16) to floats for the CPU kernels of cpu_linear_q8.cpp and
// cpu_linear_w8a8.cpp.

#include <cstdint>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "tessera/core/half.h"

namespace tessera::cpu {

// n scales as floats (exact), eight at a time with F16C: the portable conversion is ~15
// dependent integer operations per block, which stalled the FMAs behind it (measured: half the
// time of a batch-1 Q8_0 row went to it).
inline void scales_to_float(const Half* s, int64_t n, float* out) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
#endif
  for (; i < n; ++i) out[i] = float(s[i]);
}

}  // namespace tessera::cpu
