#pragma once
// 16-bit float storage types. Conversions round to nearest even and are plain integer
// arithmetic, so the CPU and the CUDA kernels produce the same bits.

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TESSERA_HD __host__ __device__
#else
#define TESSERA_HD
#endif

namespace tessera {

TESSERA_HD inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

TESSERA_HD inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

struct BFloat16 {
  uint16_t bits = 0;

  BFloat16() = default;
  TESSERA_HD BFloat16(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a float
  TESSERA_HD operator float() const { return bits_float(uint32_t(bits) << 16); }

  TESSERA_HD static uint16_t from_float(float f) {
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                         // round to even
    return uint16_t(u >> 16);
  }
};

struct Half {
  uint16_t bits = 0;

  Half() = default;
  TESSERA_HD Half(float f) : bits(from_float(f)) {}  // NOLINT: implicit like a float
  TESSERA_HD operator float() const { return to_float(bits); }

  TESSERA_HD static uint16_t from_float(float f) {
    uint32_t u = float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
    if (u >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow rounds to inf
    if (u < 0x38800000u) {                                  // subnormal half or zero
      if (u < 0x33000000u) return uint16_t(sign);           // below half the smallest subnormal
      uint32_t mant = (u & 0x7fffffu) | 0x800000u;
      int shift = 126 - int(u >> 23);  // 14 + (113 - exp)
      uint32_t rounded = mant >> shift;
      uint32_t rem = mant & ((1u << shift) - 1u);
      uint32_t half_point = 1u << (shift - 1);
      if (rem > half_point || (rem == half_point && (rounded & 1u))) ++rounded;
      return uint16_t(sign | rounded);
    }
    uint32_t r = u - 0x38000000u;  // rebias exponent 127 -> 15
    r += 0xfffu + ((r >> 13) & 1u);
    return uint16_t(sign | (r >> 13));
  }

  TESSERA_HD static float to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
      if (mant == 0) return bits_float(sign);
      // Normalise the subnormal.
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      return bits_float(sign | (uint32_t(112 - e) << 23) | (mant << 13));
    }
    return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  }
};

}  // namespace tessera
