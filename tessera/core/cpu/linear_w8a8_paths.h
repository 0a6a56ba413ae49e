#pragma once
// The W8A8 CPU kernel (cpu_linear_w8a8.cpp) has two paths with the same bits: AVX2 (sign,
// maddubs, madd) and a portable loop. Every build compiles the portable one, so a test on an
// AVX2 machine compares the two, and a benchmark times them side by side.

namespace tessera::cpu {

// Whether this build has the AVX2 path (AVX2 and FMA at compile time).
bool w8a8_vector_available();
// Whether linear_w8a8 takes it (available, and not switched off). Process-wide; not for use
// while products run.
bool w8a8_vector_enabled();
void set_w8a8_vector_enabled(bool enabled);

}  // namespace tessera::cpu
