#pragma once
// The scalar reference of the CPU AdamW (adamw_scalar_reference.cpp): the formula of
// core/detail/adamw_coefficients.h written out again, one element at a time, compiled without
// vectorisation or contraction. Every kernel path must give its bits; the benchmark times it.

#include <cstdint>

#include "tessera/core/cpu/cpu_adamw.h"

namespace tessera::testing {

// Updates elements [first, first + n) of `a` (first a multiple of 4), as cpu::AdamChunkFn does.
void adamw_scalar_reference(const cpu::AdamArrays& a, int64_t first, int64_t n,
                            const AdamCoefficients& c);

}  // namespace tessera::testing
