// FLOP counts: Narayanan et al. 2021's eq. 3 against a hand computation for three models, the
// planner's shape-by-shape count against eq. 3 for GPT-style blocks, and what GQA and SwiGLU
// change.

#include <gtest/gtest.h>

#include "tessera/plan/workload.h"

namespace tessera::plan {
namespace {

// eq. 3 written out term by term for each model (B = 1, s = 2048, V = 51,200), then summed by
// hand. The numbers are exact in double (every product is an integer below 2^53 until the last
// division), so the comparison is exact up to the final rounding of the quotients.
TEST(Flops, NarayananEquationMatchesHandComputation) {
  struct Case {
    double l, h;
    double hand;  // 96 B s l h^2 + 16 B s^2 l h + 6 B s h V
  };
  const double s = 2048, V = 51200;
  const Case cases[] = {
      // 1.7B: 96*2048*24*2304^2 + 16*2048^2*24*2304 + 6*2048*2304*51200
      {24, 2304, 25048249270272.0 + 3710851743744.0 + 1449551462400.0},
      // GPT-3 175B: l 96, h 12288
      {96, 12288, 2849934139195392.0 + 79164837199872.0 + 7730941132800.0},
      // 1T: l 128, h 25600
      {128, 25600, 16492674416640000.0 + 219902325555200.0 + 16106127360000.0},
  };
  for (const Case& c : cases) {
    const double got = narayanan_flops(1, s, c.l, c.h, V);
    EXPECT_NEAR(got / c.hand, 1.0, 1e-15) << "l " << c.l << " h " << c.h;
  }
  // Without recomputation the blocks run three passes and the head still three.
  const double three = narayanan_flops_no_recompute(1, s, 96, 12288, V);
  EXPECT_NEAR(three, 2849934139195392.0 * 0.75 + 79164837199872.0 * 0.75 + 7730941132800.0,
              1e-3 * 7730941132800.0);
}

// A GPT-2-style block (GELU at 4h, multi-head attention, tied head) counts exactly eq. 3.
TEST(Flops, ShapeCountEqualsEquationThreeForGptBlocks) {
  for (const char* name : {"megatron-1.7b", "gpt3-175b", "megatron-1t"}) {
    const nn::GPTConfig m = plan_model(name);
    const double B = 8, s = 2048;
    const double eq3 =
        narayanan_flops(B, s, double(m.n_layer), double(m.n_embd), double(m.padded_vocab_size()));
    EXPECT_NEAR(training_flops(m, int64_t(B), int64_t(s), 1.0) / eq3, 1.0, 1e-12) << name;
    const double three = narayanan_flops_no_recompute(B, s, double(m.n_layer), double(m.n_embd),
                                                      double(m.padded_vocab_size()));
    EXPECT_NEAR(training_flops(m, int64_t(B), int64_t(s), 0.0) / three, 1.0, 1e-12) << name;
  }
}

// SwiGLU's three f-wide matrices are 6 h f per token and pass (16 h^2 at f = 8h/3), GQA's qkv
// 2 h (H + 2 Hkv) d; checked on Llama-2-70B's shape by hand.
TEST(Flops, GqaAndSwigluChangeTheBlockTerms) {
  const nn::GPTConfig m = plan_model("llama-70b-like");
  const double h = 8192, f = 28672, d = 128, H = 64, Hkv = 8, s = 4096, l = 80;
  const FlopsPerToken got = flops_per_token(m, int64_t(s));
  EXPECT_DOUBLE_EQ(got.layers, l * 2 * (h * (H + 2 * Hkv) * d + h * h + 3 * h * f));
  EXPECT_DOUBLE_EQ(got.attention, l * 4 * s * H * d);
  EXPECT_DOUBLE_EQ(got.logits, 2 * h * 32000);
  // About 69.0B parameters, as Llama 2's paper counts them (untied head, no biases).
  EXPECT_NEAR(double(parameter_count(m)) / 1e9, 68.98, 0.01);
}

}  // namespace
}  // namespace tessera::plan
