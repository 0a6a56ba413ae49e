// The self-test kernels (tessera/cuda/kernels/sim_selftest_kernels.cu) in the simulator
// against plain CPU loops, on sizes that are no multiple of the block or tile size, with both
// schedules and blocks on one or two host threads.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "tessera/cuda/kernels/sim_selftest_kernels.h"
#include "tessera/cuda/sim/device_memory.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

class SimKernels : public ::testing::TestWithParam<std::tuple<sim::Schedule, int>> {
 protected:
  void SetUp() override {
    scoped_ = std::make_unique<sim::ScopedOptions>(
        testing::options_with(std::get<0>(GetParam()), std::get<1>(GetParam())));
  }
  std::unique_ptr<sim::ScopedOptions> scoped_;
  std::mt19937 rng_{3};
};

TEST_P(SimKernels, BlockSumWithWarpShufflesMatchesTheCpu) {
  constexpr int64_t n = 100003;
  constexpr int kBlocks = 7, kThreads = 96;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng_);
  sim::DeviceBuffer<float> dx(x, "x");
  sim::DeviceBuffer<float> partials(kBlocks, "partials");
  selftest::block_sum(dx.data(), n, partials.data(), kBlocks, kThreads);
  for (int b = 0; b < kBlocks; ++b) {
    double ref = 0.0, magnitude = 0.0;
    for (int64_t i = int64_t(b) * kThreads; i < n; i += int64_t(kBlocks) * kThreads)
      for (int64_t j = i; j < std::min<int64_t>(i + kThreads, n); ++j) {
        ref += x[size_t(j)];
        magnitude += std::fabs(x[size_t(j)]);
      }
    // Each thread adds ~149 values in f32, then 5 + 2 butterfly levels: the recursive
    // summation bound (149 + 7) * 2^-24 of the sum of magnitudes.
    EXPECT_NEAR(partials[size_t(b)], ref, 156 * std::ldexp(magnitude, -24)) << "block " << b;
  }
}

TEST_P(SimKernels, TiledMatmulMatchesTheCpuOnOddSizes) {
  constexpr int m = 37, n = 29, k = 45;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(m * k), b(k * n);
  for (float& v : a) v = dist(rng_);
  for (float& v : b) v = dist(rng_);
  sim::DeviceBuffer<float> da(a, "a"), db(b, "b"), dc(m * n, "c");
  selftest::tiled_matmul(da.data(), db.data(), dc.data(), m, n, k);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = 0.0, magnitude = 0.0;
      for (int p = 0; p < k; ++p) {
        ref += double(a[size_t(i * k + p)]) * b[size_t(p * n + j)];
        magnitude += std::fabs(double(a[size_t(i * k + p)]) * b[size_t(p * n + j)]);
      }
      // k rounded products and k additions in f32: at most 2k * 2^-24 of the magnitude sum.
      EXPECT_NEAR(dc[size_t(i * n + j)], ref, 2 * k * std::ldexp(magnitude, -24)) << i << "," << j;
    }
}

TEST_P(SimKernels, HistogramWithSharedAndGlobalAtomicsMatchesTheCpu) {
  constexpr int64_t n = 5000;
  constexpr int kBins = 300;
  std::uniform_int_distribution<int> dist(-5, kBins + 20);  // some values fall outside the bins
  std::vector<int> values(n);
  for (int& v : values) v = dist(rng_);
  sim::DeviceBuffer<int> dv(values, "values");
  sim::DeviceBuffer<unsigned> counts(std::vector<unsigned>(kBins, 0u), "counts");
  selftest::histogram(dv.data(), n, counts.data(), kBins, 5, 64);
  std::vector<unsigned> ref(kBins, 0u);
  for (int v : values)
    if (v >= 0 && v < kBins) ++ref[size_t(v)];
  EXPECT_EQ(counts.to_vector(), ref);
}

TEST_P(SimKernels, WarpScanAndBallotMatchTheCpu) {
  constexpr int64_t n = 1000;
  std::uniform_int_distribution<int> dist(-9, 9);
  std::vector<int> x(n);
  for (int& v : x) v = dist(rng_);
  sim::DeviceBuffer<int> dx(x, "x"), out(n, "out");
  sim::DeviceBuffer<unsigned> positive((n + 31) / 32, "positive");
  selftest::warp_scan(dx.data(), out.data(), positive.data(), n);
  for (int64_t w = 0; w * 32 < n; ++w) {
    int sum = 0;
    unsigned ballot = 0;
    for (int lane = 0; lane < 32 && w * 32 + lane < n; ++lane) {
      const int v = x[size_t(w * 32 + lane)];
      sum += v;
      EXPECT_EQ(out[size_t(w * 32 + lane)], sum);
      if (v > 0) ballot |= 1u << lane;
    }
    EXPECT_EQ(positive[size_t(w)], ballot) << "warp " << w;
  }
}

INSTANTIATE_TEST_SUITE_P(Schedules, SimKernels,
                         ::testing::Combine(::testing::Values(sim::Schedule::kForward,
                                                              sim::Schedule::kReverse),
                                            ::testing::Values(1, 2)));

}  // namespace
}  // namespace tessera::cuda
