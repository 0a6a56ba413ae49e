#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. The value at stream position i is a pure function of (seed, i), so
// any thread, rank or device can compute any element without shared state. Compiles for host
// and CUDA device alike, so dropout masks are bit-identical across backends.

#include <cstdint>

#include "tessera/core/half.h"  // TESSERA_HD

namespace tessera::philox {

struct Block {
  uint32_t v[4];
};

TESSERA_HD inline void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = uint64_t(a) * uint64_t(b);
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}

// Ten rounds over counter (c0..c3) with key (k0, k1).
TESSERA_HD inline Block philox4x32(uint64_t counter, uint64_t key) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, c0, hi0, lo0);
    mulhilo(0xCD9E8D57u, c2, hi1, lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// The 32 random bits at stream position i: lane i % 4 of block i / 4.
TESSERA_HD inline uint32_t bits(uint64_t seed, uint64_t i) {
  return philox4x32(i >> 2, seed).v[i & 3];
}

// Uniform in [0, 1) with 24 random bits.
TESSERA_HD inline float to_unit_float(uint32_t x) {
  return float(x >> 8) * (1.0f / 16777216.0f);
}

// Dropout keeps an element when its bits are at or above this threshold (p in [0, 1)).
TESSERA_HD inline uint32_t drop_threshold(double p) {
  double t = p * 4294967296.0;
  return t >= 4294967295.0 ? 0xffffffffu : uint32_t(t);
}

}  // namespace tessera::philox
