// The model side of model parallelism in one process: pipeline stages built from a StageSpec,
// unit hooks, and parameter metadata.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/nn/tiny_models.h"

namespace tessera::nn {
namespace {

using testing::OneThread;
using testing::tiny_gpt2;
using testing::tiny_llama;
using testing::token_batch;

ModelParallel stage(int64_t first, int64_t count, bool embedding, bool head) {
  ModelParallel mp;
  mp.stage = StageSpec{first, count, embedding, head};
  return mp;
}

Tensor leaf_of(const Tensor& x) {
  Tensor l = ops::clone(x);
  l.set_requires_grad(true);
  return l;
}

// Three stages of a three-layer model, chained by hand as a pipeline would: the loss and
// every gradient equal the whole model's. The stages run the same kernels on the same shapes,
// so the values are bit-identical; the tied embedding's gradient is the sum of the first
// stage's (lookup) and the last stage's copy (head), as the pipeline's all-reduce makes it.
void stages_match_whole(const GPTConfig& base) {
  OneThread one;
  GPTConfig cfg = base;
  cfg.dropout = 0.1;
  GPT whole(cfg);
  GPT s0(cfg, DType::f32, stage(0, 1, true, false));
  GPT s1(cfg, DType::f32, stage(1, 1, false, false));
  GPT s2(cfg, DType::f32, stage(2, -1, false, true));
  for (GPT* m : {&whole, &s0, &s1, &s2}) m->set_step(5);
  EXPECT_EQ(s1.first_layer(), 1);
  EXPECT_EQ(s2.num_layers(), 1);
  EXPECT_TRUE(find_tensor(s1.named_parameters(), "h.1.attn.c_attn.weight").defined());
  EXPECT_FALSE(find_tensor(s1.named_parameters(), "h.0.ln_1.weight").defined());

  const Tensor idx = token_batch(2, 6, cfg.vocab_size, 1);
  Tensor tgt = token_batch(2, 6, cfg.vocab_size, 2);
  Tensor loss = whole.loss(idx, tgt);
  loss.backward();

  Tensor h0 = s0.forward_stage(idx);
  Tensor in1 = leaf_of(h0);
  Tensor h1 = s1.forward_stage(in1);
  Tensor in2 = leaf_of(h1);
  Tensor l2 = s2.forward_stage(in2, tgt);
  EXPECT_EQ(l2.item<float>(), loss.item<float>());
  l2.backward();
  h1.backward(in2.grad());
  h0.backward(in1.grad());

  const StateDict params = whole.named_parameters();
  for (GPT* s : {&s0, &s1, &s2}) {
    for (const auto& [name, p] : s->named_parameters()) {
      Tensor want = find_tensor(params, name).grad();
      ASSERT_TRUE(want.defined() && p.grad().defined()) << name;
      if (name == "wte.weight" && cfg.tie_embeddings) continue;
      EXPECT_TRUE(equal(p.grad(), want)) << name;
    }
  }
  if (cfg.tie_embeddings) {
    const std::string w = "wte.weight";
    EXPECT_TRUE(s2.param_meta(w).tied_copy);
    EXPECT_FALSE(s0.param_meta(w).tied_copy);
    // The copy starts from the same key: the same values as the first stage's table.
    EXPECT_TRUE(equal(find_tensor(s2.named_parameters(), w), find_tensor(params, w)));
    Tensor sum = ops::add(find_tensor(s0.named_parameters(), w).grad(),
                          find_tensor(s2.named_parameters(), w).grad());
    EXPECT_TRUE(allclose(sum, find_tensor(params, w).grad(), 1e-6, 1e-9))
        << "two f32 partial sums added in another order: a few ulps at most";
  } else {
    EXPECT_FALSE(find_tensor(s2.named_parameters(), "wte.weight").defined());
  }
}

TEST(GptStage, Gpt2StagesMatchTheWholeModel) {
  stages_match_whole(tiny_gpt2(3));
}

TEST(GptStage, LlamaStagesMatchTheWholeModel) {
  stages_match_whole(tiny_llama(3));
}

TEST(GptStage, BadStagesAreErrors) {
  EXPECT_THROW(GPT(tiny_gpt2(2), DType::f32, stage(1, 2, false, true)), Error);
  EXPECT_THROW(GPT(tiny_gpt2(2), DType::f32, stage(-1, 1, true, false)), Error);
  EXPECT_THROW(GPT(tiny_gpt2(2), DType::f32, stage(2, 0, false, false)), Error);
  GPT middle(tiny_gpt2(2), DType::f32, stage(1, 1, false, false));
  const Tensor idx = token_batch(1, 4, 23, 3);
  try {
    middle.loss(idx, idx);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("use forward_stage"), std::string::npos) << e.what();
  }
  // A stage after the first takes hidden states, not ids.
  EXPECT_THROW(middle.forward_stage(idx), Error);
  GPT last(tiny_gpt2(2), DType::f32, stage(1, 1, false, true));
  EXPECT_THROW(last.forward_stage(zeros({1, 4, 16})), Error);  // no targets
}

// Records each hook call as "before:unit" / "after:unit".
class Recorder final : public UnitHooks {
 public:
  Tensor before(const std::string& unit, const Tensor& x) override {
    calls.push_back("before:" + unit);
    return x;
  }
  Tensor after(const std::string& unit, const Tensor& x) override {
    calls.push_back("after:" + unit);
    return x;
  }
  std::vector<std::string> calls;
};

TEST(GptStage, UnitHooksWrapEveryUnitInOrder) {
  auto hooks = std::make_shared<Recorder>();
  ModelParallel mp;
  mp.hooks = hooks;
  GPT model(tiny_gpt2(2), DType::f32, mp);
  GPT plain(tiny_gpt2(2));
  const Tensor idx = token_batch(2, 5, 23, 4), tgt = token_batch(2, 5, 23, 5);
  // Pass-through hooks change nothing.
  EXPECT_TRUE(equal(model.loss(idx, tgt), plain.loss(idx, tgt)));
  EXPECT_EQ(hooks->calls,
            (std::vector<std::string>{"before:embedding", "after:embedding", "before:h.0",
                                      "after:h.0", "before:h.1", "after:h.1", "before:head",
                                      "after:head"}));
  const auto units = model.parameter_units();
  ASSERT_EQ(units.size(), 4u);
  EXPECT_EQ(units[0].second, (std::vector<std::string>{"wte.weight", "wpe.weight"}));
  EXPECT_EQ(units[1].first, "h.0");
  EXPECT_EQ(units[1].second.size(), 12u);  // 2 norms x 2, c_attn, attn c_proj, c_fc, mlp c_proj
  // The tied head reads wte.weight too.
  EXPECT_EQ(units[3].second,
            (std::vector<std::string>{"wte.weight", "ln_f.weight", "ln_f.bias"}));
}

TEST(GptStage, SingleProcessParametersAreReplicated) {
  GPT model(tiny_llama(1));
  const auto metas = model.named_parameter_meta();
  ASSERT_EQ(metas.size(), model.named_parameters().size());
  for (const auto& [name, meta] : metas) {
    EXPECT_EQ(meta.shard, ShardKind::replicated) << name;
    EXPECT_FALSE(meta.tied_copy) << name;
  }
  EXPECT_EQ(model.vocab_rows(), model.config().padded_vocab_size());
  EXPECT_THROW(model.param_meta("nope"), Error);
  EXPECT_NE(model.describe_parallel().find("single process"), std::string::npos);
}

}  // namespace
}  // namespace tessera::nn
