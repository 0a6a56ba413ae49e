// The fused AdamW step's rounded copy on the CPU backend (ops::adamw_step_ with `rounded`):
// round-to-nearest equals the old update-then-cast bits exactly; stochastic rounding to bf16
// only ever yields one of the two bf16 neighbours, is unbiased, and is a pure function of
// (seed, step, element index); 16-bit gradients equal their f32 widening; bad copies are
// refused by name.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "nn/tiny_models.h"

namespace tessera::nn {
namespace {

// Elements per test: more than two of the CPU kernel's 4096-element chunks, and not a multiple
// of the four elements a Philox block covers.
constexpr int64_t kN = 10007;

struct State {
  Tensor p, g, m, v;
};

State random_state(int64_t n, uint64_t seed, DType grad_dtype = DType::f32) {
  Generator gen(seed);
  return {randn({n}, gen), ops::cast(randn({n}, gen), grad_dtype), mul(randn({n}, gen), 0.1),
          rand({n}, gen, DType::f32, Device::cpu(), 0.0, 0.05)};
}

State clone(const State& s) {
  return {ops::clone(s.p), ops::clone(s.g), ops::clone(s.m), ops::clone(s.v)};
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(ops::contiguous(a).data_ptr(), ops::contiguous(b).data_ptr(), a.nbytes()) == 0;
}

AdamWArgs some_args(int64_t step) {
  AdamWArgs a;
  a.lr = 3e-3f;
  a.weight_decay = 0.1f;
  a.grad_scale = 0.5f;
  a.step = step;
  return a;
}

TEST(AdamWRounding, NearestEqualsUpdateThenCastBitForBit) {
  for (DType copy_dtype : {DType::bf16, DType::f16}) {
    State fused = random_state(kN, 1), plain = clone(fused);
    Tensor copy = empty({kN}, copy_dtype);
    for (int64_t step : {1, 2, 50}) {
      ops::adamw_step_(fused.p, fused.g, fused.m, fused.v, some_args(step), copy);
      ops::adamw_step_(plain.p, plain.g, plain.m, plain.v, some_args(step));
      EXPECT_TRUE(same_bits(fused.p, plain.p)) << dtype_name(copy_dtype) << " step " << step;
      EXPECT_TRUE(same_bits(fused.m, plain.m));
      EXPECT_TRUE(same_bits(fused.v, plain.v));
      EXPECT_TRUE(same_bits(copy, ops::cast(plain.p, copy_dtype)))
          << dtype_name(copy_dtype) << " step " << step;
    }
  }
}

// Widening bf16/f16 to f32 is exact, so a 16-bit gradient is its f32 copy to the bit.
TEST(AdamWRounding, SixteenBitGradientsEqualTheirF32Widening) {
  for (DType grad_dtype : {DType::bf16, DType::f16}) {
    State low = random_state(kN, 2, grad_dtype), wide = clone(low);
    wide.g = ops::cast(low.g, DType::f32);
    Tensor copy = empty({kN}, DType::bf16), copy_wide = empty({kN}, DType::bf16);
    ops::adamw_step_(low.p, low.g, low.m, low.v, some_args(3), copy);
    ops::adamw_step_(wide.p, wide.g, wide.m, wide.v, some_args(3), copy_wide);
    EXPECT_TRUE(same_bits(low.p, wide.p)) << dtype_name(grad_dtype);
    EXPECT_TRUE(same_bits(low.m, wide.m));
    EXPECT_TRUE(same_bits(copy, copy_wide));
  }
}

// With lr = 0 the step leaves param exactly as it is (decay 1, a zero update), so the copy is
// the rounding of known values: kN draws of one value x, each from its own element's bits.
Tensor round_stochastic(const Tensor& x, uint64_t seed, int64_t step) {
  Tensor p = ops::clone(x), g = zeros_like(x), m = zeros_like(x), v = zeros_like(x);
  Tensor copy = empty(x.shape(), DType::bf16);
  AdamWArgs a;
  a.lr = 0.0f;
  a.step = step;
  a.stochastic_rounding = true;
  a.rounding_seed = seed;
  ops::adamw_step_(p, g, m, v, a, copy);
  EXPECT_TRUE(same_bits(p, x)) << "lr = 0 must leave param unchanged";
  return ops::cast(copy, DType::f32);
}

// For x between bf16 neighbours lo < hi (in magnitude), with q = the fraction of the way from
// lo to hi (the 16 bits bf16 drops, over 2^16): every draw is lo or hi, hi with probability q,
// so the mean of N draws is x with standard deviation (hi - lo) sqrt(q (1 - q) / N). The bound
// is 5 of those (a 6e-7 chance for a fair rounding to fail; the draws are fixed, so the test is
// deterministic), i.e. within 0.01 ulp of bf16 at N = 10007; a biased rounding (always down,
// say) misses by q ulp.
TEST(AdamWRounding, StochasticRoundingIsUnbiasedBetweenTheTwoNeighbours) {
  for (float x : {1.0f + 0.3f / 128.0f, -2.5f - 0.01f / 64.0f, 3.0e-3f * 1.0007f, 1234.567f}) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    uint32_t lo_bits = bits & 0xffff0000u, hi_bits = lo_bits + 0x10000u;
    float lo, hi;
    std::memcpy(&lo, &lo_bits, 4);
    std::memcpy(&hi, &hi_bits, 4);
    const double q = double(bits & 0xffffu) / 65536.0;
    ASSERT_GT(q, 0.0) << x << " must not be a bf16 value";
    const std::vector<float> r = to_vector<float>(round_stochastic(full({kN}, x), 5, 1));
    double sum = 0;
    int64_t up = 0;
    for (float y : r) {
      ASSERT_TRUE(y == lo || y == hi) << x << " rounded to " << y << ", not " << lo << " or " << hi;
      sum += y;
      up += y == hi;
    }
    const double sigma = std::abs(double(hi) - double(lo)) * std::sqrt(q * (1 - q) / double(kN));
    EXPECT_NEAR(sum / double(kN), double(x), 5 * sigma) << x << ": rounded up " << up << " times";
  }
}

// bf16 values have nothing to round: they come back unchanged whatever the bits.
TEST(AdamWRounding, StochasticRoundingKeepsBf16Values) {
  Generator gen(6);
  const Tensor x = ops::cast(ops::cast(randn({kN}, gen), DType::bf16), DType::f32);
  EXPECT_TRUE(same_bits(round_stochastic(x, 7, 3), x));
}

// The draws are a function of (seed, step, element index): the same key gives the same bits,
// another step or seed other bits, and splitting the tensor at a Philox block boundary (as the
// optimizer's chunks do) changes nothing.
TEST(AdamWRounding, StochasticRoundingIsDeterministicPerKey) {
  const Tensor x = full({kN}, 1.0f + 0.5f / 128.0f);  // q = 1/2: the most random case
  const Tensor a = round_stochastic(x, 11, 4);
  EXPECT_TRUE(same_bits(round_stochastic(x, 11, 4), a));
  EXPECT_FALSE(same_bits(round_stochastic(x, 11, 5), a));
  EXPECT_FALSE(same_bits(round_stochastic(x, 12, 4), a));
  {
    ScopedNumThreads threads(3);
    EXPECT_TRUE(same_bits(round_stochastic(x, 11, 4), a));
  }
}

void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected an error mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(AdamWRounding, BadCopiesAreRefusedByName) {
  State s = random_state(12, 8);
  AdamWArgs sr;
  sr.stochastic_rounding = true;
  expect_error([&] { ops::adamw_step_(s.p, s.g, s.m, s.v, sr, empty({12}, DType::f16)); },
               "stochastic rounding writes a bf16 copy of param, got rounded = f16[12]");
  expect_error([&] { ops::adamw_step_(s.p, s.g, s.m, s.v, sr); }, "got rounded = none");
  expect_error([&] { ops::adamw_step_(s.p, s.g, s.m, s.v, AdamWArgs{}, zeros({12})); },
               "rounded must be bf16 or f16, got f32[12]");
  expect_error([&] { ops::adamw_step_(s.p, s.g, s.m, s.v, AdamWArgs{}, empty({13}, DType::bf16)); },
               "rounded must have shape [12], got bf16[13]");
  expect_error([&] { ops::adamw_step_(s.p, ops::cast(s.g, DType::f64), s.m, s.v, AdamWArgs{}); },
               "grad must be f32, bf16 or f16, got f64[12]");
}

// nn::AdamW::step_rounded writes every parameter's copy, and names a missing one.
TEST(AdamWRounding, StepRoundedFillsEveryCopy) {
  GPT master(testing::tiny_gpt2()), half(testing::tiny_gpt2(), DType::bf16);
  AdamW opt(master.named_parameters(), AdamWOptions{});
  for (const auto& [name, p] : master.named_parameters()) p.set_grad(full(p.shape(), 0.5));
  opt.step_rounded(1.0, half.named_parameters(), RoundingOptions{});
  const StateDict h = half.named_parameters();
  size_t i = 0;
  for (const auto& [name, p] : master.named_parameters())
    EXPECT_TRUE(same_bits(h[i++].second, ops::cast(p, DType::bf16))) << name;
  StateDict missing = h;
  missing.pop_back();
  expect_error([&] { opt.step_rounded(1.0, missing, RoundingOptions{}); },
               "no rounded copy for parameter '" + h.back().first + "'");
}

}  // namespace
}  // namespace tessera::nn
