// The CPU AdamW's paths (portable, AVX2, AVX-512) against the scalar reference
// (adamw_scalar_reference.cpp, built without vectorisation or contraction): bit-identical params,
// moments and rounded copies, for every path this CPU runs, over odd sizes (vector tails, a
// partial last chunk), f32/bf16/f16 gradients, every copy, grad_scale and weight decay, early
// and late steps, and values from zero and subnormal to huge, infinite and NaN. The bits do not
// depend on the thread count. A path the CPU lacks is skipped, and each test prints which ran.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "tessera/core/cpu/cpu_adamw.h"
#include "tessera/tessera.h"
#include "tests/core/adamw_scalar_reference.h"

namespace tessera {
namespace cpu {
// Test names and failure messages name the path.
void PrintTo(AdamPath path, std::ostream* os) {
  *os << adamw_path_name(path);
}
}  // namespace cpu
namespace {

using cpu::AdamArrays, cpu::AdamCopy, cpu::AdamGrad, cpu::AdamPath;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// One tensor's AdamW state, owned.
struct State {
  std::vector<float> p, m, v;
  std::vector<uint16_t> g16, rounded;
  std::vector<float> g32;
  AdamGrad grad = AdamGrad::f32;
  AdamCopy copy = AdamCopy::none;

  AdamArrays arrays() {
    AdamArrays a;
    a.p = p.data();
    a.m = m.data();
    a.v = v.data();
    a.g = grad == AdamGrad::f32 ? static_cast<const void*>(g32.data()) : g16.data();
    a.rounded = copy == AdamCopy::none ? nullptr : rounded.data();
    a.grad = grad;
    a.copy = copy;
    return a;
  }
};

// A float of random sign and mantissa with exponent in [lo, hi]: spans what f16 flushes, rounds
// to subnormal, and overflows, and what bf16 keeps.
float wide(std::mt19937& rng, int lo, int hi) {
  std::uniform_int_distribution<int> e(lo, hi);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  const float x = std::ldexp(mant(rng), e(rng));
  return rng() & 1 ? -x : x;
}

// A gradient: mostly ordinary, some zero, subnormal, tiny, huge, infinite or NaN (one NaN
// source per element, so every path must carry the same payload).
float gradient(std::mt19937& rng) {
  switch (rng() % 16) {
    case 0:
      return 0.0f;
    case 1:
      return -0.0f;
    case 2:
      return from_bits(1 + rng() % 0x7fffff);  // f32 subnormal
    case 3:
      return wide(rng, -40, -20);
    case 4:
      return wide(rng, 20, 60);  // its square overflows to inf
    case 5:
      return wide(rng, 100, 127);
    case 6:
      return rng() % 8 == 0 ? std::numeric_limits<float>::infinity() : wide(rng, -10, 0);
    case 7:
      return rng() % 8 == 0 ? from_bits(0x7fc00000u | (rng() & 0x3fe000u) | (rng() & 0x80000000u))
                            : wide(rng, -10, 0);
    default:
      return wide(rng, -12, 2);
  }
}

State make_state(int64_t n, AdamGrad grad, AdamCopy copy, uint32_t seed) {
  std::mt19937 rng(seed);
  State s;
  s.grad = grad;
  s.copy = copy;
  s.p.resize(size_t(n));
  s.m.resize(size_t(n));
  s.v.resize(size_t(n));
  s.rounded.assign(size_t(n), 0xdead);
  for (int64_t i = 0; i < n; ++i) {
    const int kind = int(rng() % 8);
    s.p[size_t(i)] = kind == 0 ? 0.0f : wide(rng, -30, 18);
    s.m[size_t(i)] = kind == 1 ? 0.0f : wide(rng, -20, 0);
    s.v[size_t(i)] = kind <= 2 ? 0.0f : std::fabs(wide(rng, -40, 0));
  }
  if (grad == AdamGrad::f32) {
    s.g32.resize(size_t(n));
    for (float& x : s.g32) x = gradient(rng);
  } else {
    s.g16.resize(size_t(n));
    for (uint16_t& h : s.g16) {
      const float x = gradient(rng);
      h = grad == AdamGrad::bf16 ? BFloat16::from_float(x) : Half::from_float(x);
    }
    // An f16 signalling NaN, which the hardware conversion quiets.
    if (grad == AdamGrad::f16 && n > 5) s.g16[5] = 0x7d01;
  }
  return s;
}

AdamWArgs args_at(int64_t step, AdamCopy copy) {
  AdamWArgs a;
  a.lr = 3e-3f;
  a.weight_decay = 0.1f;
  a.grad_scale = 0.37f;
  a.step = step;
  a.stochastic_rounding = copy == AdamCopy::bf16_stochastic;
  a.rounding_seed = 1234;
  return a;
}

::testing::AssertionResult same_bits(const char* what, const void* a, const void* b, size_t count,
                                     size_t size) {
  const auto* x = static_cast<const unsigned char*>(a);
  const auto* y = static_cast<const unsigned char*>(b);
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(x + i * size, y + i * size, size) == 0) continue;
    uint32_t u = 0, w = 0;
    std::memcpy(&u, x + i * size, size);
    std::memcpy(&w, y + i * size, size);
    std::ostringstream os;
    os << what << "[" << i << "] differs: 0x" << std::hex << u << " vs 0x" << w;
    return ::testing::AssertionFailure() << os.str();
  }
  return ::testing::AssertionSuccess();
}

void expect_equal(const State& got, const State& want, const std::string& where) {
  const size_t n = want.p.size();
  EXPECT_TRUE(same_bits("p", got.p.data(), want.p.data(), n, 4)) << where;
  EXPECT_TRUE(same_bits("m", got.m.data(), want.m.data(), n, 4)) << where;
  EXPECT_TRUE(same_bits("v", got.v.data(), want.v.data(), n, 4)) << where;
  EXPECT_TRUE(same_bits("rounded", got.rounded.data(), want.rounded.data(), n, 2)) << where;
}

const char* grad_name(AdamGrad g) {
  return g == AdamGrad::f32 ? "f32" : g == AdamGrad::bf16 ? "bf16" : "f16";
}

const char* copy_name(AdamCopy c) {
  switch (c) {
    case AdamCopy::none:
      return "none";
    case AdamCopy::bf16:
      return "bf16";
    case AdamCopy::f16:
      return "f16";
    case AdamCopy::bf16_stochastic:
      return "bf16-stochastic";
  }
  return "?";
}

class CpuAdamwPath : public ::testing::TestWithParam<AdamPath> {
 protected:
  void SetUp() override {
    if (!cpu::adamw_path_available(GetParam()))
      GTEST_SKIP() << "this CPU lacks the " << cpu::adamw_path_name(GetParam()) << " path";
    std::cout << "[ adamw path ] " << cpu::adamw_path_name(GetParam()) << " ran\n";
  }
};

TEST_P(CpuAdamwPath, BitIdenticalToScalarReference) {
  const AdamPath path = GetParam();
  for (int64_t n : {1, 7, 15, 17, 4095, 4097, 100003}) {
    for (AdamGrad grad : {AdamGrad::f32, AdamGrad::bf16, AdamGrad::f16}) {
      for (AdamCopy copy :
           {AdamCopy::none, AdamCopy::bf16, AdamCopy::f16, AdamCopy::bf16_stochastic}) {
        State want = make_state(n, grad, copy, uint32_t(n * 31 + int(grad) * 7 + int(copy)));
        State got = want;
        // Several steps in a row on the same state, early and late in training.
        for (int64_t step : {1, 2, 1000}) {
          const AdamCoefficients c = adamw_coefficients(args_at(step, copy));
          cpu::adamw_run(&testing::adamw_scalar_reference, want.arrays(), n, c);
          cpu::adamw_run(path, got.arrays(), n, c);
          expect_equal(got, want,
                       str_cat(cpu::adamw_path_name(path), " n=", n, " grad=", grad_name(grad),
                               " copy=", copy_name(copy), " step=", step));
          if (HasFailure()) return;
        }
      }
    }
  }
}

TEST_P(CpuAdamwPath, ThreadCountDoesNotChangeBits) {
  const int64_t n = 3 * 4096 + 1001;
  for (AdamCopy copy : {AdamCopy::none, AdamCopy::bf16_stochastic}) {
    const State start = make_state(n, AdamGrad::bf16, copy, 99);
    const AdamCoefficients c = adamw_coefficients(args_at(5, copy));
    State one = start;
    {
      ScopedNumThreads threads(1);
      cpu::adamw_run(GetParam(), one.arrays(), n, c);
    }
    for (int t : {2, 3}) {
      ScopedNumThreads threads(t);
      State many = start;
      cpu::adamw_run(GetParam(), many.arrays(), n, c);
      expect_equal(many, one, str_cat(t, " threads, copy=", copy_name(copy)));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, CpuAdamwPath,
                         ::testing::Values(AdamPath::scalar, AdamPath::avx2, AdamPath::avx512),
                         [](const auto& param_info) {
                           return cpu::adamw_path_name(param_info.param);
                         });

// The backend entry point (through the op front end) runs the chosen path with the right
// arrays: a bf16 gradient and a stochastic bf16 copy against the reference.
TEST(CpuAdamw, FrontEndRunsTheChosenPath) {
  std::cout << "[ adamw path ] default: " << cpu_adamw_path() << "\n";
  const int64_t n = 10007;
  State want = make_state(n, AdamGrad::bf16, AdamCopy::bf16_stochastic, 7);
  std::vector<BFloat16> g(want.g16.size());
  for (size_t i = 0; i < g.size(); ++i) g[i].bits = want.g16[i];
  Tensor p = from_vector(want.p, {n}), m = from_vector(want.m, {n}), v = from_vector(want.v, {n});
  Tensor grad = from_vector(g, {n}), rounded = empty({n}, DType::bf16);
  const AdamWArgs args = args_at(3, AdamCopy::bf16_stochastic);
  ops::adamw_step_(p, grad, m, v, args, rounded);
  cpu::adamw_run(&testing::adamw_scalar_reference, want.arrays(), n, adamw_coefficients(args));
  EXPECT_TRUE(same_bits("p", to_vector<float>(p).data(), want.p.data(), size_t(n), 4));
  EXPECT_TRUE(same_bits("m", to_vector<float>(m).data(), want.m.data(), size_t(n), 4));
  EXPECT_TRUE(same_bits("v", to_vector<float>(v).data(), want.v.data(), size_t(n), 4));
  EXPECT_TRUE(
      same_bits("rounded", to_vector<BFloat16>(rounded).data(), want.rounded.data(), size_t(n), 2));
}

TEST(CpuAdamw, PathFromEnvironment) {
  const AdamPath best = cpu::adamw_path_available(AdamPath::avx512) ? AdamPath::avx512
                        : cpu::adamw_path_available(AdamPath::avx2) ? AdamPath::avx2
                                                                    : AdamPath::scalar;
  EXPECT_EQ(cpu::adamw_path_from_env(nullptr), best);
  EXPECT_EQ(cpu::adamw_path_from_env(""), best);
  EXPECT_EQ(cpu::adamw_path_from_env("scalar"), AdamPath::scalar);
  EXPECT_EQ(cpu::adamw_path(), cpu::adamw_path_from_env(std::getenv("TESSERA_CPU_ADAMW")));
  try {
    cpu::adamw_path_from_env("avx9");
    ADD_FAILURE() << "an unknown path was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "TESSERA_CPU_ADAMW=avx9: unknown AdamW path, expected scalar, avx2 or avx512");
  }
  for (AdamPath path : {AdamPath::avx2, AdamPath::avx512}) {
    const char* name = cpu::adamw_path_name(path);
    if (cpu::adamw_path_available(path)) {
      EXPECT_EQ(cpu::adamw_path_from_env(name), path);
      continue;
    }
    try {
      cpu::adamw_path_from_env(name);
      ADD_FAILURE() << "a path this CPU lacks was accepted: " << name;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(str_cat("TESSERA_CPU_ADAMW=", name)), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace tessera
