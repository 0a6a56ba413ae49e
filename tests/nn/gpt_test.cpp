// The GPT model: parameter names and shapes, counts for every preset, GPT-2 init, state dicts,
// the padded vocabulary, dropout keying, bad input, and gradcheck of the whole loss in f64.

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "nn/tiny_models.h"
#include "support/error_of.h"

namespace tessera::nn {
namespace {

using testing::tiny_gpt2;
using testing::tiny_llama;
using testing::token_batch;

std::vector<std::string> expected_names(const GPTConfig& c) {
  std::vector<std::string> n{"wte.weight"};
  if (c.position == PositionKind::learned) n.push_back("wpe.weight");
  auto add = [&](const std::string& prefix, bool has_bias) {
    n.push_back(prefix + ".weight");
    if (has_bias) n.push_back(prefix + ".bias");
  };
  const bool ln_bias = c.bias && c.norm == NormKind::layernorm;
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    add(h + "ln_1", ln_bias);
    add(h + "attn.c_attn", c.bias);
    add(h + "attn.c_proj", c.bias);
    add(h + "ln_2", ln_bias);
    if (c.mlp == MlpKind::gelu) {
      add(h + "mlp.c_fc", c.bias);
    } else {
      add(h + "mlp.w_gate", c.bias);
      add(h + "mlp.w_up", c.bias);
    }
    add(h + "mlp.c_proj", c.bias);
  }
  add("ln_f", ln_bias);
  if (!c.tie_embeddings) n.push_back("lm_head.weight");
  return n;
}

Tensor param(const GPT& m, const std::string& name) {
  Tensor t = find_tensor(m.named_parameters(), name);
  EXPECT_TRUE(t.defined()) << name;
  return t;
}

TEST(GPT, ParameterNamesAndShapesGpt2) {
  GPTConfig c = tiny_gpt2();
  GPT m(c);
  std::vector<std::string> names;
  for (const auto& [n, t] : m.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, expected_names(c));
  EXPECT_EQ(param(m, "wte.weight").shape(), (Shape{24, 16}));  // 23 padded to 24
  EXPECT_EQ(param(m, "wpe.weight").shape(), (Shape{16, 16}));
  EXPECT_EQ(param(m, "h.1.attn.c_attn.weight").shape(), (Shape{48, 16}));
  EXPECT_EQ(param(m, "h.1.attn.c_proj.weight").shape(), (Shape{16, 16}));
  EXPECT_EQ(param(m, "h.0.mlp.c_fc.weight").shape(), (Shape{64, 16}));
  EXPECT_EQ(param(m, "h.0.mlp.c_proj.weight").shape(), (Shape{16, 64}));
  EXPECT_EQ(m.num_parameters(), GPT::count_parameters(c));
  EXPECT_EQ(m.forward(token_batch(2, 5, 23, 1)).shape(), (Shape{2, 5, 24}));
}

TEST(GPT, ParameterNamesAndShapesLlama) {
  GPTConfig c = tiny_llama();
  GPT m(c);
  std::vector<std::string> names;
  for (const auto& [n, t] : m.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, expected_names(c));
  // 4 query heads and 2 kv heads of 4 dims: (4 + 2 * 2) * 4 rows.
  EXPECT_EQ(param(m, "h.0.attn.c_attn.weight").shape(), (Shape{32, 16}));
  const int64_t h = c.ffn_dim();
  EXPECT_EQ(param(m, "h.0.mlp.w_gate.weight").shape(), (Shape{h, 16}));
  EXPECT_EQ(param(m, "h.0.mlp.c_proj.weight").shape(), (Shape{16, h}));
  EXPECT_EQ(param(m, "lm_head.weight").shape(), (Shape{24, 16}));
  EXPECT_EQ(m.num_parameters(), GPT::count_parameters(c));
  EXPECT_EQ(m.forward(token_batch(2, 5, 23, 1)).shape(), (Shape{2, 5, 24}));
}

// GPT-2's published sizes count the unpadded 50257-row table; llm.c's 124,475,904 counts the
// table padded to 50304 rows.
TEST(GPT, ParameterCountsOfThePresets) {
  EXPECT_EQ(GPT::count_parameters(GPTConfig::preset("gpt2-d12")), 124475904);
  const std::pair<const char*, int64_t> gpt2[] = {{"gpt2-d12", 124439808},
                                                  {"gpt2-d24", 354823168},
                                                  {"gpt2-d36", 774030080},
                                                  {"gpt2-d48", 1557611200}};
  for (const auto& [name, count] : gpt2) {
    GPTConfig c = GPTConfig::preset(name);
    c.vocab_multiple = 1;
    EXPECT_EQ(GPT::count_parameters(c), count) << name;
  }
  // llama-d12: two 50304 x 768 tables (untied) = 77,266,944; per layer two RMSNorms (1,536),
  // c_attn (12 + 2 * 4) * 64 x 768 = 983,040, c_proj 589,824 and SwiGLU 3 x 768 x 2048 =
  // 4,718,592, so 6,292,992 x 12 = 75,515,904; ln_f 768.
  EXPECT_EQ(GPT::count_parameters(GPTConfig::preset("llama-d12")), 152783616);
  for (const std::string& name : GPTConfig::preset_names()) {
    GPTConfig c = GPTConfig::preset(name);
    EXPECT_EQ(c.padded_vocab_size() % 64, 0) << name;
    if (name.find("tiny") != std::string::npos) {
      EXPECT_EQ(GPT(c).num_parameters(), GPT::count_parameters(c)) << name;
    }
  }
}

// The real 124M model: its count, padded rows, and GPT-2's init statistics on large samples.
TEST(GPT, Gpt2SmallInit) {
  GPTConfig c = GPTConfig::preset("gpt2-d12");
  GPT m(c);
  EXPECT_EQ(m.num_parameters(), 124475904);
  auto stats = [](const Tensor& t) {
    const double mean = ops::mean(t).item<double>();
    return std::pair{mean, std::sqrt(ops::mean(ops::mul(t, t)).item<double>() - mean * mean)};
  };
  // c_attn has 1.77M draws: the sample std is within 0.02 * 4 / sqrt(2 * 1.77e6) ~ 4.3e-5 of
  // 0.02 at four sigma; 1e-4 leaves room.
  auto [m1, s1] = stats(param(m, "h.3.attn.c_attn.weight"));
  EXPECT_NEAR(m1, 0.0, 1e-4);
  EXPECT_NEAR(s1, 0.02, 1e-4);
  // Residual projections: 0.02 / sqrt(2 * 12) = 0.0040825; 590k draws, four sigma ~1.5e-5.
  auto [m2, s2] = stats(param(m, "h.7.attn.c_proj.weight"));
  EXPECT_NEAR(s2, 0.02 / std::sqrt(24.0), 3e-5);
  auto [m3, s3] = stats(param(m, "h.11.mlp.c_proj.weight"));
  EXPECT_NEAR(s3, 0.02 / std::sqrt(24.0), 3e-5);
  auto [m4, s4] = stats(param(m, "wpe.weight"));
  EXPECT_NEAR(s4, 0.02, 2e-4);  // 786k draws, as c_attn
  Tensor pad = ops::narrow(param(m, "wte.weight"), 0, 50257, 47);
  EXPECT_EQ(ops::sum(ops::mul(pad, pad)).item<double>(), 0.0);
  EXPECT_EQ(to_vector<float>(param(m, "h.0.ln_1.weight")), std::vector<float>(768, 1.0f));
  EXPECT_EQ(to_vector<float>(param(m, "h.0.mlp.c_fc.bias")), std::vector<float>(3072, 0.0f));
}

// A parameter's values come from (init_seed, its name) only: a deeper model shares the
// shallower one's layers (up to the residual scale), and another seed changes everything.
TEST(GPT, InitIsKeyedByNameNotBuildOrder) {
  GPT a(tiny_gpt2(2)), b(tiny_gpt2(3));
  for (const char* name : {"wte.weight", "wpe.weight", "h.1.attn.c_attn.weight",
                           "h.0.mlp.c_fc.weight", "h.1.ln_2.bias"})
    EXPECT_EQ(to_vector<float>(param(a, name)), to_vector<float>(param(b, name))) << name;
  // c_proj's std is 0.02 / sqrt(2 L): the same draws times sqrt(4 / 6).
  std::vector<float> pa = to_vector<float>(param(a, "h.1.mlp.c_proj.weight"));
  std::vector<float> pb = to_vector<float>(param(b, "h.1.mlp.c_proj.weight"));
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_NEAR(pb[i], pa[i] * std::sqrt(4.0 / 6.0), 1e-8);  // f32 rounding of O(0.01) values
  GPTConfig other = tiny_gpt2(2);
  other.init_seed = 8;
  EXPECT_NE(to_vector<float>(param(GPT(other), "wte.weight")),
            to_vector<float>(param(a, "wte.weight")));
  // Tied and untied heads: the untied one draws lm_head from its own name, padded rows zero.
  GPT llama(tiny_llama());
  std::vector<float> head = to_vector<float>(param(llama, "lm_head.weight"));
  for (size_t i = 23 * 16; i < head.size(); ++i) EXPECT_EQ(head[i], 0.0f);
  EXPECT_NE(head, to_vector<float>(param(llama, "wte.weight")));
}

// ParamInit::zeros draws nothing: every drawn weight is zero (the norms keep their ones), and
// a load makes the model the drawn one, to the bit.
TEST(GPT, ZeroInitDrawsNothingAndALoadMakesItTheDrawnModel) {
  for (const GPTConfig& c : {tiny_gpt2(2), tiny_llama()}) {
    const GPT drawn(c);
    GPT blank(c, DType::f32, ModelParallel{}, ParamInit::zeros);
    for (const auto& [name, t] : blank.named_parameters()) {
      const bool norm = name.find("ln_") != std::string::npos && name.ends_with(".weight");
      const std::vector<float> v = to_vector<float>(t);
      const std::vector<float> want =
          norm ? to_vector<float>(param(drawn, name)) : std::vector<float>(v.size(), 0.0f);
      EXPECT_EQ(v, want) << name;
    }
    const Tensor idx = token_batch(2, 5, 23, 4);
    blank.load_state_dict(drawn.state_dict());
    EXPECT_EQ(to_vector<float>(blank.forward(idx)), to_vector<float>(drawn.forward(idx)));
  }
}

// With defer_parameters every Linear and Embedding weight is built without memory: the model
// holds only its norm gains, biases and buffers, reading a deferred weight is an error that
// says why, and each weight's fill makes exactly the drawn model's values (the padded vocabulary
// rows zero), or zeros under ParamInit::zeros.
TEST(GPT, DeferredWeightsHoldNoMemoryAndTheirFillsAreTheDrawnWeights) {
  for (const GPTConfig& c : {tiny_gpt2(2), tiny_llama()})
    for (ParamInit init : {ParamInit::drawn, ParamInit::zeros}) {
      const GPT drawn(c);
      ModelParallel mp;
      mp.defer_parameters = true;
      Allocator& host = allocator_for(Device::cpu());
      const int64_t before = host.stats().live_bytes;
      const GPT deferred(c, DType::f32, mp, init);
      int64_t held = 0;
      for (const auto& [name, t] : deferred.state_dict())
        if (!t.storage()->never_allocated()) held += int64_t(t.nbytes());
      EXPECT_EQ(host.stats().live_bytes - before, held);
      int64_t weights = 0;
      for (const auto& [name, t] : deferred.named_parameters()) {
        const ParamFill fill = deferred.param_fill(name);
        const bool drawn_weight = name.ends_with("weight") && t.dim() == 2;
        ASSERT_EQ(bool(fill), drawn_weight) << name;
        ASSERT_EQ(t.storage()->never_allocated(), drawn_weight) << name;
        if (!drawn_weight) continue;
        ++weights;
        const std::vector<float> v = to_vector<float>(materialize(t.shape(), t.dtype(), fill));
        EXPECT_EQ(v, init == ParamInit::zeros ? std::vector<float>(v.size(), 0.0f)
                                              : to_vector<float>(param(drawn, name)))
            << name;
      }
      EXPECT_GT(weights, 4);
      EXPECT_NE(tessera::testing::error_of([&] {
                  to_vector<float>(param(deferred, "wte.weight"));
                }).find("has no memory yet: it is a deferred parameter"),
                std::string::npos)
          << tessera::testing::error_of([&] { to_vector<float>(param(deferred, "wte.weight")); });
    }
  GPTConfig q8 = tiny_gpt2(2);
  q8.quantization = "q8_0";
  ModelParallel mp;
  mp.defer_parameters = true;
  EXPECT_NE(tessera::testing::error_of([&] {
              GPT(q8, DType::f32, mp);
            }).find("cannot be deferred (ModelParallel::defer_parameters)"),
            std::string::npos);
}

TEST(GPT, StateDictRoundTrip) {
  GPTConfig c = tiny_llama();
  GPT a(c);
  c.init_seed = 99;
  GPT b(c);
  Tensor idx = token_batch(2, 7, 23, 3);
  EXPECT_NE(to_vector<float>(a.forward(idx)), to_vector<float>(b.forward(idx)));
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(to_vector<float>(a.forward(idx)), to_vector<float>(b.forward(idx)));
  GPT gpt2(tiny_gpt2());
  EXPECT_THROW(b.load_state_dict(gpt2.state_dict()), Error);
}

// The loss counts only the 23 real classes of the 24 columns, and the padded row of the tied
// table gets exactly zero gradient (from the head and from the lookup alike).
TEST(GPT, LossIgnoresThePaddedVocabulary) {
  GPT m(tiny_gpt2());
  Tensor idx = token_batch(3, 8, 23, 4), targets = token_batch(3, 8, 23, 5);
  Tensor loss = m.loss(idx, targets);
  Tensor logits = m.forward(idx);
  Tensor real = ops::contiguous(ops::narrow(logits, 2, 0, 23));
  EXPECT_EQ(loss.item<float>(), ops::cross_entropy_forward(real, targets).loss.item<float>());
  loss.backward();
  std::vector<float> g = to_vector<float>(param(m, "wte.weight").grad());
  for (size_t i = 23 * 16; i < 24 * 16; ++i) EXPECT_EQ(g[i], 0.0f);
  // At init the logits are O(0.02 * 0.02 * 16) ~ 0, so the loss is near log(23) = 3.135,
  // and clearly away from log(24) = 3.178 (what counting the padding would give).
  EXPECT_NEAR(loss.item<float>(), std::log(23.0), 0.02);
}

TEST(GPT, DropoutIsKeyedByStepAndOffInEval) {
  GPTConfig c = tiny_gpt2();
  c.dropout = 0.2;
  GPT m(c);
  Tensor idx = token_batch(2, 8, 23, 6), targets = token_batch(2, 8, 23, 7);
  m.set_step(3);
  const float l3 = m.loss(idx, targets).item<float>();
  EXPECT_EQ(m.loss(idx, targets).item<float>(), l3);  // same step, same masks
  m.set_step(4);
  EXPECT_NE(m.loss(idx, targets).item<float>(), l3);
  m.eval();
  c.dropout = 0.0;
  GPT plain(c);
  EXPECT_EQ(m.loss(idx, targets).item<float>(), plain.loss(idx, targets).item<float>());
}

void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> fragments) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& f : fragments)
      EXPECT_NE(msg.find(f), std::string::npos) << "message lacks \"" << f << "\": " << msg;
    return;
  }
  ADD_FAILURE() << "expected a tessera::Error";
}

TEST(GPT, BadInputNamesTheProblem) {
  GPT m(tiny_gpt2());
  // 23 is inside the padded table (24 rows) but not a real token.
  Tensor ids = from_vector<int64_t>({1, 2, 3, 4, 5, 23}, Shape{2, 3});
  expect_error([&] { m.forward(ids); }, {"token id 23", "[1, 2]", "vocab_size = 23"});
  expect_error([&] { m.forward(from_vector<int64_t>({-1}, Shape{1, 1})); }, {"token id -1"});
  expect_error([&] { m.forward(token_batch(1, 17, 23, 1)); }, {"17 tokens", "block_size 16"});
  expect_error([&] { m.forward(zeros(Shape{1, 4})); }, {"i32/i64 [B, T]", "f32[1, 4]"});
  expect_error([&] { m.forward(zeros(Shape{4}, DType::i64)); }, {"[B, T]"});
  Tensor targets = from_vector<int64_t>({1, 2, 3, 4, 23, 0}, Shape{2, 3});
  expect_error([&] { m.loss(token_batch(2, 3, 23, 1), targets); }, {"target 23", "position 4"});
  auto bad = [](auto edit, std::initializer_list<std::string> fragments) {
    GPTConfig c = tiny_gpt2();
    edit(c);
    expect_error([&] { GPT g(c); }, fragments);
  };
  bad([](GPTConfig& c) { c.n_embd = 15; }, {"n_embd", "n_head"});
  bad(
      [](GPTConfig& c) {
        c.n_kv_head = 3;
        c.n_head = 2;
      },
      {"n_kv_head"});
  bad([](GPTConfig& c) { c.vocab_size = 0; }, {"vocab_size"});
  bad([](GPTConfig& c) { c.dropout = 1.0; }, {"dropout"});
  bad(
      [](GPTConfig& c) {
        c.position = PositionKind::rope;
        c.n_embd = 6;
        c.n_head = 2;
      },
      {"RoPE", "even"});
  EXPECT_THROW(GPT(tiny_gpt2(), DType::i32), Error);
}

TEST(GPTConfig, SizesWhoseDerivedSizesWouldOverflowAreRefused) {
  // From fuzz/train_config: vocab_size 2^63 - 1 passed validate() and overflowed
  // padded_vocab_size(); n_embd 2^62 overflowed ffn_dim(). Every size now fits int32.
  auto refused = [](const char* json, std::initializer_list<std::string> fragments) {
    expect_error([&] { GPTConfig::from_json(nlohmann::json::parse(json)).validate(); }, fragments);
  };
  refused(R"({"vocab_size": 9223372036854775807})",
          {"vocab_size", "9223372036854775807", "largest size"});
  refused(R"({"n_embd": 4611686018427387904, "n_head": 1, "n_kv_head": 1})",
          {"n_embd", "largest size"});
  refused(R"({"ffn_hidden": 2147483648})", {"ffn_hidden", "largest size"});
  GPTConfig c = GPTConfig::from_json(nlohmann::json::parse(R"({"vocab_size": 2147483647})"));
  c.validate();
  EXPECT_EQ(c.padded_vocab_size(), 2147483648);
}

// Gradcheck of the whole model's loss in f64: each listed parameter's elements perturbed by
// +-1e-6. Both models use dropout (fixed masks for a fixed step), the GPT-2 one a padded
// vocabulary with a tied head, the Llama one RoPE and grouped-query attention.
void gradcheck_model(GPTConfig c, const std::vector<std::string>& names) {
  testing::OneThread one_thread;
  c.dropout = 0.1;
  GPT m(c, DType::f64);
  m.set_step(2);
  Tensor idx = token_batch(2, 6, c.vocab_size, 11), targets = token_batch(2, 6, c.vocab_size, 12);
  std::vector<Tensor> inputs;
  for (const std::string& n : names) inputs.push_back(param(m, n));
  autograd::GradcheckOptions opt;
  // The loss is a composition of ~40 smooth ops in f64: the default atol 1e-7 and rtol 1e-5
  // cover central-difference truncation (eps^2 ~ 1e-12 times third derivatives) and round-off
  // (1e-16 / eps ~ 1e-10).
  autograd::GradcheckResult r = autograd::gradcheck(
      [&](const std::vector<Tensor>&) { return m.loss(idx, targets); }, inputs, opt);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(GPT, GradcheckGpt2LossInF64) {
  gradcheck_model(tiny_gpt2(), {"wte.weight", "h.0.attn.c_attn.bias", "h.1.ln_1.weight",
                                "h.1.mlp.c_proj.bias", "ln_f.bias"});
}

TEST(GPT, GradcheckLlamaLossInF64) {
  gradcheck_model(tiny_llama(), {"h.0.attn.c_attn.weight", "h.1.ln_2.weight",
                                 "h.0.mlp.w_gate.weight", "lm_head.weight"});
}

}  // namespace
}  // namespace tessera::nn
