#pragma once
// The CPU AdamW kernel's paths: a portable one (plain C++ over core/detail/adamw_coefficients.h)
// and explicit AVX2+FMA and AVX-512F ones, chosen once at run time from what the CPU has, or by
// TESSERA_CPU_ADAMW=scalar|avx2|avx512. Every path gives the same bits (each vector op is the
// one correctly rounded op the scalar formula spells out), so the choice is a matter of speed;
// tests force each path through adamw_run(path, ...) and compare it with a scalar reference.

#include <cstdint>

#include "tessera/core/detail/adamw_coefficients.h"

namespace tessera::cpu {

enum class AdamPath : uint8_t { scalar, avx2, avx512 };
enum class AdamGrad : uint8_t { f32, bf16, f16 };
// The optional low-precision copy of the updated param: none, bf16 or f16 to nearest even, or
// bf16 rounded stochastically with c.round_key.
enum class AdamCopy : uint8_t { none, bf16, f16, bf16_stochastic };

// One tensor's arrays, each pointing at element 0. grad holds `grad`-typed elements; rounded
// (the bits of the bf16/f16 copy) is read only when copy is not none.
struct AdamArrays {
  float* p = nullptr;
  const void* g = nullptr;
  float* m = nullptr;
  float* v = nullptr;
  uint16_t* rounded = nullptr;
  AdamGrad grad = AdamGrad::f32;
  AdamCopy copy = AdamCopy::none;
};

// Updates elements [first, first + n) of `a`: first is a multiple of 4 (a Philox block).
using AdamChunkFn = void (*)(const AdamArrays& a, int64_t first, int64_t n,
                             const AdamCoefficients& c);

void adamw_chunk_scalar(const AdamArrays& a, int64_t first, int64_t n, const AdamCoefficients& c);
void adamw_chunk_avx2(const AdamArrays& a, int64_t first, int64_t n, const AdamCoefficients& c);
void adamw_chunk_avx512(const AdamArrays& a, int64_t first, int64_t n, const AdamCoefficients& c);

// Stochastic bf16 rounding of p[first, first + n) into rounded (first a multiple of 4): the
// vector paths call it for their chunk after the update, while the chunk is in cache.
void adamw_round_stochastic(const AdamArrays& a, int64_t first, int64_t n,
                            const AdamCoefficients& c);

// Whether this CPU can run a path (scalar always; avx2 needs AVX2, FMA and F16C; avx512 needs
// AVX-512F), and its name ("scalar", "avx2", "avx512").
bool adamw_path_available(AdamPath path);
const char* adamw_path_name(AdamPath path);

// The path a TESSERA_CPU_ADAMW value asks for (null or empty: the best the CPU has). Throws a
// one-line error naming the variable for an unknown value or a path this CPU lacks.
AdamPath adamw_path_from_env(const char* value);

// The path CpuBackend::adamw_step runs: adamw_path_from_env(getenv("TESSERA_CPU_ADAMW")),
// decided on first use and kept for the process.
AdamPath adamw_path();

AdamChunkFn adamw_chunk(AdamPath path);

// The whole update of n elements: fixed 4096-element chunks (so the bits do not depend on the
// thread count), spread over the CPU backend's threads, each chunk run by `chunk`.
void adamw_run(AdamChunkFn chunk, const AdamArrays& a, int64_t n, const AdamCoefficients& c);
inline void adamw_run(AdamPath path, const AdamArrays& a, int64_t n, const AdamCoefficients& c) {
  adamw_run(adamw_chunk(path), a, n, c);
}

}  // namespace tessera::cpu

namespace tessera {

// The name of the path the CPU AdamW runs in this process ("scalar", "avx2" or "avx512").
inline const char* cpu_adamw_path() {
  return cpu::adamw_path_name(cpu::adamw_path());
}

}  // namespace tessera
