#pragma once
// The fragment layouts of the tensor-core mma: a fact of the hardware that the GPU kernels
// (through tessera/cuda/device.h) and the simulator's warp collectives (warp.cpp) both use, so
// it sits at the bottom, with the other hardware facts (hardware_limits.h).

#if defined(__CUDACC__)
#define TESSERA_MMA_HD __host__ __device__
#else
#define TESSERA_MMA_HD
#endif

namespace tessera::cuda {

// Fragment layouts of mma.sync.aligned.m16n8k16.row.col with 16-bit inputs and f32
// accumulators (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type").
// Per lane: A (16x16) is 8 elements a0..a7 in 4 .b32 registers (element i in register i/2, the
// even one in the low half); B (16x8, k by n) is b0..b3 in 2 registers; C and D (16x8) are
// c0..c3 in 4 floats. Each function gives the matrix row or column of element i of `lane`.
struct MmaLayout {
  TESSERA_MMA_HD static constexpr int group(int lane) { return lane >> 2; }
  TESSERA_MMA_HD static constexpr int thread_in_group(int lane) { return lane & 3; }
  TESSERA_MMA_HD static constexpr int a_row(int lane, int i) {
    return group(lane) + ((i & 2) ? 8 : 0);
  }
  TESSERA_MMA_HD static constexpr int a_col(int lane, int i) {
    return thread_in_group(lane) * 2 + (i & 1) + ((i & 4) ? 8 : 0);
  }
  TESSERA_MMA_HD static constexpr int b_row(int lane, int i) {
    return thread_in_group(lane) * 2 + (i & 1) + ((i & 2) ? 8 : 0);
  }
  TESSERA_MMA_HD static constexpr int b_col(int lane, int /*i*/) { return group(lane); }
  TESSERA_MMA_HD static constexpr int c_row(int lane, int i) {
    return group(lane) + ((i & 2) ? 8 : 0);
  }
  TESSERA_MMA_HD static constexpr int c_col(int lane, int i) {
    return thread_in_group(lane) * 2 + (i & 1);
  }
};

}  // namespace tessera::cuda
