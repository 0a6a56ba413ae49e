#pragma once
// The W8A8 CPU kernel (cpu_linear_w8a8.cpp) has paths with the same bits: AVX-512 VNNI
// (vpdpbusd), AVX2 (sign, maddubs, madd) and a portable loop. Every build compiles the portable
// one, so a test compares every path the build has, and a benchmark times them side by side.

#include <vector>

namespace tessera::cpu {

enum class W8A8Path { portable, avx2, avx512_vnni };

const char* w8a8_path_name(W8A8Path path);
// The paths this build has, slowest first: portable always; avx2 with AVX2 and FMA at compile
// time; avx512_vnni with AVX-512 VNNI and VL as well.
std::vector<W8A8Path> w8a8_paths_available();
// The path linear_w8a8 takes: the fastest available unless set. Process-wide; not for use while
// products run. Setting one the build lacks throws.
W8A8Path w8a8_path();
void set_w8a8_path(W8A8Path path);

}  // namespace tessera::cpu
