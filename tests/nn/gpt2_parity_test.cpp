// GPT-2 parity with PyTorch: a small GPT-2 written by transformers (tools/make_gpt2_fixture.py)
// is imported through import_hf_gpt2, and Tessera's logits, loss, every gradient and the losses
// of 5 AdamW steps are compared with what PyTorch computed on the same weights and tokens.
//
// The fixture's vocabulary (100) is no multiple of 64, so the model runs on a padded table of
// 128 rows: the padded logit columns are not compared, and the padded rows of wte must get
// exactly zero gradient. The targets hold one ignored position (-100).

#include <gtest/gtest.h>

#include "nn/gpt2_parity_fixture.h"

namespace tessera::nn {
namespace {

using testing::relative_error;
using Gpt2Parity = testing::Gpt2ParityFixture;

TEST_F(Gpt2Parity, FixtureImportsAsAPaddedTiedGpt2) {
  EXPECT_EQ(config_.n_layer, 2);
  EXPECT_EQ(config_.n_head, 2);
  EXPECT_EQ(config_.n_embd, 32);
  EXPECT_EQ(config_.vocab_size, 100);
  EXPECT_EQ(config_.padded_vocab_size(), 128);
  EXPECT_TRUE(config_.tie_embeddings);
  EXPECT_EQ(inputs_.shape(), (Shape{2, 12}));
  EXPECT_EQ(targets_.shape(), (Shape{2, 12}));
}

// Logits over the real vocabulary and the mean loss. fp32 forward passes that sum in different
// orders (GEMM blocking, layernorm and softmax reductions) agree to a few ulps per operation;
// through two blocks that stays well inside 1e-4 of the logits' scale (the tolerance
// for logits), and the loss, a mean of 23 log-softmax terms, inside 1e-5 relative. Measured:
// 1.1e-7 (logits) and 1.0e-7 (loss), about one f32 ulp.
TEST_F(Gpt2Parity, LogitsAndLossMatchPyTorch) {
  auto m = model();
  Tensor logits = m->forward(inputs_);
  ASSERT_EQ(logits.shape(), (Shape{2, 12, 128}));
  Tensor real = ops::narrow(logits, 2, 0, config_.vocab_size);
  EXPECT_LT(relative_error(real, golden("logits")), 1e-4);

  const double loss = m->loss(inputs_, targets_).item<float>();
  const double want = golden("loss").item<float>();
  EXPECT_LT(std::abs(loss - want) / std::abs(want), 1e-5) << loss << " vs " << want;
}

// Every parameter's gradient. The golden gradients carry Hugging Face names and layout; the
// importer's own mapping (hf_gpt2_to_tessera) turns them into Tessera's, transposing the
// Conv1D weights and padding wte's rows with zeros. wte's gradient includes the tied head's.
// Tolerance 1e-4 of each gradient's scale (the issue's): backward sums run in orders that
// differ from PyTorch's, each off by a few ulps, across about a dozen chained products.
// Measured: 0.9e-7 to 4.7e-7 over the 28 gradients.
TEST_F(Gpt2Parity, EveryGradientMatchesPyTorch) {
  auto m = model();
  m->loss(inputs_, targets_).backward();

  const StateDict want = golden_gradients();

  const StateDict params = m->named_parameters();
  ASSERT_EQ(params.size(), want.size());
  for (const auto& [name, p] : params) {
    SCOPED_TRACE(name);
    const Tensor w = find_tensor(want, name);
    ASSERT_TRUE(w.defined());
    ASSERT_TRUE(p.grad().defined());
    ASSERT_EQ(p.grad().shape(), w.shape());
    EXPECT_LT(relative_error(p.grad(), w), 1e-4);
  }
  // The padded rows name no class: nothing may flow into them (exactly zero).
  Tensor pad = ops::narrow(find_tensor(params, "wte.weight").grad(), 0, config_.vocab_size,
                           config_.padded_vocab_size() - config_.vocab_size);
  for (float v : to_vector<float>(ops::contiguous(pad))) ASSERT_EQ(v, 0.0f);
}

// Five AdamW steps with PyTorch's hyperparameters (from the fixture's metadata) and groups:
// decay on every tensor of 2 or more dims, none on biases and norms. The loss before each step
// must match to 1e-5 relative (the loss tolerance): each step moves every weight by
// about lr = 1e-2 in a direction set by m / sqrt(v), which fp32 rounding differences of 1e-7
// in the gradients barely change, so the losses stay close to the first one. Measured: 1.0e-7
// at step 0 growing to 9.9e-7 at step 4, still 10x inside the tolerance.
TEST_F(Gpt2Parity, FiveAdamWStepsMatchPyTorch) {
  const AdamWOptions o = adamw_options();
  const int steps = adamw_steps();

  auto m = model();
  AdamW opt(decay_groups(m->named_parameters(), o.weight_decay), o);
  const std::vector<float> want = to_vector<float>(golden("adamw_losses"));
  ASSERT_EQ(int(want.size()), steps);
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss = m->loss(inputs_, targets_);
    const double got = loss.item<float>();
    EXPECT_LT(std::abs(got - want[size_t(s)]) / std::abs(want[size_t(s)]), 1e-5)
        << "step " << s << ": " << got << " vs " << want[size_t(s)];
    loss.backward();
    opt.step();
  }
}

}  // namespace
}  // namespace tessera::nn
