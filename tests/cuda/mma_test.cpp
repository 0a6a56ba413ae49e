// Tensor-core fragments: MmaLayout and the simulated mma.sync against the PTX ISA's fragment
// tables ("Matrix Fragments for mma.m16n8k16 with floating point type"), transcribed here
// independently; a plain 16x8x16 product is the reference. Then a bf16 GEMM kernel built on it.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tessera/cuda/device.h"
#include "tessera/cuda/kernels/sim_selftest_kernels.h"
#include "tessera/cuda/sim/device_memory.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

// The PTX ISA's formulas, as written there: groupID = %laneid >> 2,
// threadID_in_group = %laneid % 4.
int ptx_a_row(int lane, int i) { return (i < 2 || (i >= 4 && i < 6)) ? lane >> 2 : (lane >> 2) + 8; }
int ptx_a_col(int lane, int i) { return i < 4 ? (lane % 4) * 2 + (i & 1) : (lane % 4) * 2 + (i & 1) + 8; }
int ptx_b_row(int lane, int i) { return i < 2 ? (lane % 4) * 2 + (i & 1) : (lane % 4) * 2 + (i & 1) + 8; }
int ptx_b_col(int lane, int) { return lane >> 2; }
int ptx_c_row(int lane, int i) { return i < 2 ? lane >> 2 : (lane >> 2) + 8; }
int ptx_c_col(int lane, int i) { return (lane % 4) * 2 + (i & 1); }

TEST(SimMma, MmaLayoutIsThePtxFragmentLayout) {
  std::vector<int> a_seen(16 * 16), b_seen(16 * 8), c_seen(16 * 8);
  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(MmaLayout::a_row(lane, i), ptx_a_row(lane, i)) << lane << " " << i;
      EXPECT_EQ(MmaLayout::a_col(lane, i), ptx_a_col(lane, i)) << lane << " " << i;
      ++a_seen[size_t(ptx_a_row(lane, i) * 16 + ptx_a_col(lane, i))];
    }
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(MmaLayout::b_row(lane, i), ptx_b_row(lane, i));
      EXPECT_EQ(MmaLayout::b_col(lane, i), ptx_b_col(lane, i));
      EXPECT_EQ(MmaLayout::c_row(lane, i), ptx_c_row(lane, i));
      EXPECT_EQ(MmaLayout::c_col(lane, i), ptx_c_col(lane, i));
      ++b_seen[size_t(ptx_b_row(lane, i) * 8 + ptx_b_col(lane, i))];
      ++c_seen[size_t(ptx_c_row(lane, i) * 8 + ptx_c_col(lane, i))];
    }
  }
  // Each element of each matrix belongs to exactly one lane.
  for (int n : a_seen) EXPECT_EQ(n, 1);
  for (int n : b_seen) EXPECT_EQ(n, 1);
  for (int n : c_seen) EXPECT_EQ(n, 1);
  // Spot checks read off the PTX figures: lane 5 (group 1, thread 1) holds a4 = A[1][10] and
  // b2 = B[10][1]; lane 30 holds c3 = C[15][5].
  EXPECT_EQ(MmaLayout::a_row(5, 4) * 16 + MmaLayout::a_col(5, 4), 1 * 16 + 10);
  EXPECT_EQ(MmaLayout::b_row(5, 2) * 8 + MmaLayout::b_col(5, 2), 10 * 8 + 1);
  EXPECT_EQ(MmaLayout::c_row(30, 3) * 8 + MmaLayout::c_col(30, 3), 15 * 8 + 5);
}

uint16_t to_bits(float v, bool f16) { return f16 ? Half(v).bits : BFloat16(v).bits; }
float from_bits(uint16_t bits, bool f16) {
  if (f16) return Half::to_float(bits);
  BFloat16 b;
  b.bits = bits;
  return float(b);
}

class SimMmaFragments : public ::testing::TestWithParam<bool> {};

TEST_P(SimMmaFragments, EveryLanesFragmentsGiveThePlainProduct) {
  const bool f16 = GetParam();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  float a[16][16], b[16][8], c[16][8];
  for (auto& row : a)
    for (float& v : row) v = from_bits(to_bits(dist(rng), f16), f16);  // representable inputs
  for (auto& row : b)
    for (float& v : row) v = from_bits(to_bits(dist(rng), f16), f16);
  for (auto& row : c)
    for (float& v : row) v = dist(rng);

  sim::DeviceBuffer<uint32_t> a_frags(32 * 4, "a_frags"), b_frags(32 * 2, "b_frags");
  sim::DeviceBuffer<float> c_frags(32 * 4, "c_frags"), d_frags(32 * 4, "d_frags");
  for (int lane = 0; lane < 32; ++lane) {
    // Element i sits in register i / 2, the even one in the low 16 bits.
    for (int r = 0; r < 4; ++r) {
      const int i = 2 * r;
      a_frags[size_t(lane * 4 + r)] =
          uint32_t(to_bits(a[ptx_a_row(lane, i)][ptx_a_col(lane, i)], f16)) |
          uint32_t(to_bits(a[ptx_a_row(lane, i + 1)][ptx_a_col(lane, i + 1)], f16)) << 16;
    }
    for (int r = 0; r < 2; ++r) {
      const int i = 2 * r;
      b_frags[size_t(lane * 2 + r)] =
          uint32_t(to_bits(b[ptx_b_row(lane, i)][ptx_b_col(lane, i)], f16)) |
          uint32_t(to_bits(b[ptx_b_row(lane, i + 1)][ptx_b_col(lane, i + 1)], f16)) << 16;
    }
    for (int i = 0; i < 4; ++i) c_frags[size_t(lane * 4 + i)] = c[ptx_c_row(lane, i)][ptx_c_col(lane, i)];
  }
  selftest::mma_fragments(a_frags.data(), b_frags.data(), c_frags.data(), d_frags.data(), f16);

  for (int lane = 0; lane < 32; ++lane) {
    for (int i = 0; i < 4; ++i) {
      const int row = ptx_c_row(lane, i), col = ptx_c_col(lane, i);
      double ref = c[row][col], magnitude = std::fabs(c[row][col]);
      for (int k = 0; k < 16; ++k) {
        ref += double(a[row][k]) * b[k][col];
        magnitude += std::fabs(double(a[row][k]) * b[k][col]);
      }
      // Products of 16-bit floats are exact in f32; 16 f32 additions err by at most
      // 16 * 2^-24 of the sum of magnitudes (recursive summation bound).
      EXPECT_NEAR(d_frags[size_t(lane * 4 + i)], ref, 16 * std::ldexp(magnitude, -24))
          << "lane " << lane << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Bf16AndF16, SimMmaFragments, ::testing::Values(false, true));

TEST(SimMma, Bf16GemmOnTensorCoresMatchesTheCpu) {
  constexpr int m = 32, n = 24, k = 48;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  sim::DeviceBuffer<BFloat16> a(m * k, "a"), b(k * n, "b");
  sim::DeviceBuffer<float> c(m * n, "c");
  for (size_t i = 0; i < a.size(); ++i) a[i] = BFloat16(dist(rng));
  for (size_t i = 0; i < b.size(); ++i) b[i] = BFloat16(dist(rng));
  selftest::mma_matmul_bf16(a.data(), b.data(), c.data(), m, n, k);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double ref = 0.0, magnitude = 0.0;
      for (int p = 0; p < k; ++p) {
        const double prod = double(float(a[size_t(i * k + p)])) * float(b[size_t(p * n + j)]);
        ref += prod;
        magnitude += std::fabs(prod);
      }
      // Exact products, 48 f32 additions: the recursive summation bound 48 * 2^-24.
      EXPECT_NEAR(c[size_t(i * n + j)], ref, 48 * std::ldexp(magnitude, -24)) << i << "," << j;
    }
  }
}

__global__ void mma_in_partial_warp() {
  uint32_t a[4] = {}, b[2] = {};
  float c[4] = {}, d[4];
  mma_m16n8k16_bf16(d, a, b, c);
}

TEST(SimMma, APartialWarpCannotRunMma) {
  testing::expect_error(
      [] { launch(mma_in_partial_warp, testing::config(dim3(1), dim3(48), "partial_mma")); },
      {"kernel 'partial_mma'", "thread (32,0,0)", "needs all 32 lanes", "lanes 0-15 only"});
}

}  // namespace
}  // namespace tessera::cuda
