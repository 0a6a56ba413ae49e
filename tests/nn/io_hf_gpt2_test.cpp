// Hugging Face GPT-2 import and export on a small synthetic GPT-2 (2 layers, C = 8, V = 11)
// written here in Hugging Face's names and Conv1D layout.

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tessera/nn/io/hf_gpt2.h"
#include "tessera/nn/io/safetensors.h"
#include "tessera/tessera.h"
#include "tests/nn/io_test_util.h"

namespace tessera::nn {
namespace {

using testing::error_of;
using testing::mentions;
using testing::same_tensor;
using testing::TempDir;
using testing::write_bytes;

constexpr int64_t C = 8, L = 2, V = 11, T = 5;

// A GPT-2 state dict as Hugging Face's GPT2LMHeadModel saves it: Conv1D weights [in, out],
// the vocabulary unpadded, the attention-mask buffer present, lm_head tied (so absent).
StateDict hf_state(bool prefix = true, uint64_t seed = 7) {
  Generator gen(seed);
  const std::string p = prefix ? "transformer." : "";
  StateDict d = {{p + "wte.weight", randn({V, C}, gen)}, {p + "wpe.weight", randn({T, C}, gen)}};
  for (int64_t i = 0; i < L; ++i) {
    const std::string h = p + "h." + std::to_string(i) + ".";
    StateDict layer = {{h + "ln_1.weight", randn({C}, gen)},
                       {h + "ln_1.bias", randn({C}, gen)},
                       {h + "attn.bias", ones({1, 1, T, T})},
                       {h + "attn.c_attn.weight", randn({C, 3 * C}, gen)},
                       {h + "attn.c_attn.bias", randn({3 * C}, gen)},
                       {h + "attn.c_proj.weight", randn({C, C}, gen)},
                       {h + "attn.c_proj.bias", randn({C}, gen)},
                       {h + "ln_2.weight", randn({C}, gen)},
                       {h + "ln_2.bias", randn({C}, gen)},
                       {h + "mlp.c_fc.weight", randn({C, 4 * C}, gen)},
                       {h + "mlp.c_fc.bias", randn({4 * C}, gen)},
                       {h + "mlp.c_proj.weight", randn({4 * C, C}, gen)},
                       {h + "mlp.c_proj.bias", randn({C}, gen)}};
    d.insert(d.end(), layer.begin(), layer.end());
  }
  d.emplace_back(p + "ln_f.weight", randn({C}, gen));
  d.emplace_back(p + "ln_f.bias", randn({C}, gen));
  return d;
}

Tensor get(const StateDict& d, const std::string& name) {
  Tensor t = find_tensor(d, name);
  EXPECT_TRUE(t.defined()) << name;
  return t;
}

void write_config(const TempDir& dir, const nlohmann::json& cfg) {
  write_bytes(dir.file("config.json"), cfg.dump());
}

TEST(HfGpt2, ImportTransposesConv1DAndPadsTheVocabulary) {
  TempDir dir;
  StateDict hf = hf_state();
  write_safetensors(dir.file("model.safetensors"), hf, {{"format", "pt"}});
  write_config(dir, {{"model_type", "gpt2"}, {"n_head", 2}, {"n_layer", L}, {"n_embd", C}});

  GPTConfig cfg;
  StateDict ours = import_hf_gpt2(dir.path(), &cfg);  // a directory: model.safetensors inside
  EXPECT_EQ(cfg.n_layer, L);
  EXPECT_EQ(cfg.n_embd, C);
  EXPECT_EQ(cfg.n_head, 2);
  EXPECT_EQ(cfg.vocab_size, V);
  EXPECT_EQ(cfg.block_size, T);
  EXPECT_EQ(cfg.ffn_dim(), 4 * C);
  EXPECT_TRUE(cfg.tie_embeddings);
  EXPECT_EQ(cfg.padded_vocab_size(), 64);
  EXPECT_EQ(ours.size(), size_t(4 + 12 * L)) << "no buffers, no lm_head when tied";

  // Conv1D [in, out] -> Linear [out, in], element by element.
  Tensor hf_w = get(hf, "transformer.h.1.attn.c_attn.weight");
  Tensor w = get(ours, "h.1.attn.c_attn.weight");
  ASSERT_EQ(w.shape(), Shape({3 * C, C}));
  std::vector<float> a = to_vector<float>(hf_w), b = to_vector<float>(w);
  for (int64_t o = 0; o < 3 * C; ++o)
    for (int64_t i = 0; i < C; ++i) ASSERT_EQ(b[o * C + i], a[i * 3 * C + o]) << o << "," << i;
  EXPECT_TRUE(same_tensor(get(ours, "h.0.mlp.c_proj.weight"),
                          ops::transpose(get(hf, "transformer.h.0.mlp.c_proj.weight"), 0, 1)));
  EXPECT_TRUE(same_tensor(get(ours, "h.0.ln_2.bias"), get(hf, "transformer.h.0.ln_2.bias")));

  // wte: the 11 real rows, then zero rows up to 64.
  Tensor wte = get(ours, "wte.weight");
  ASSERT_EQ(wte.shape(), Shape({64, C}));
  EXPECT_TRUE(same_tensor(ops::narrow(wte, 0, 0, V), get(hf, "transformer.wte.weight")));
  EXPECT_EQ(to_vector<float>(ops::narrow(wte, 0, V, 64 - V)), std::vector<float>((64 - V) * C, 0));
}

TEST(HfGpt2, AcceptsNamesWithoutPrefixAndInfersHeads) {
  TempDir dir;
  StateDict hf = hf_state(/*prefix=*/false);
  // The hub's original files carry masked_bias buffers as well; they are not weights.
  hf.emplace_back("h.0.attn.masked_bias", scalar_tensor(-1e4));
  write_safetensors(dir.file("model.safetensors"), hf);

  // Without config.json, heads follow GPT-2's head size of 64, which C = 8 cannot have.
  EXPECT_TRUE(mentions(error_of([&] { import_hf_gpt2(dir.file("model.safetensors"), nullptr); }),
                       {"model.safetensors", "n_head", "pass n_head"}));
  GPTConfig cfg;
  HfGpt2Options opts;
  opts.n_head = 4;
  StateDict ours = import_hf_gpt2(dir.file("model.safetensors"), &cfg, opts);
  EXPECT_EQ(cfg.n_head, 4);
  EXPECT_TRUE(same_tensor(get(ours, "wpe.weight"), get(hf, "wpe.weight")));
}

TEST(HfGpt2, UntiedHeadIsImportedPadded) {
  StateDict hf = hf_state();
  Generator gen(99);
  hf.emplace_back("lm_head.weight", randn({V, C}, gen));
  GPTConfig cfg;
  StateDict ours = hf_gpt2_to_tessera(hf, nullptr, {.n_head = 2}, "mem", &cfg);
  EXPECT_FALSE(cfg.tie_embeddings);
  Tensor head = get(ours, "lm_head.weight");
  ASSERT_EQ(head.shape(), Shape({64, C}));
  EXPECT_TRUE(same_tensor(ops::narrow(head, 0, 0, V), get(hf, "lm_head.weight")));

  // A head equal to wte is the tied case; with config.json tying, a different head is an error.
  hf.back().second = ops::clone(get(hf, "transformer.wte.weight"));
  hf_gpt2_to_tessera(hf, nullptr, {.n_head = 2}, "mem", &cfg);
  EXPECT_TRUE(cfg.tie_embeddings);
  hf.back().second = randn({V, C}, gen);
  nlohmann::json tied = {{"n_head", 2}};
  EXPECT_TRUE(mentions(error_of([&] { hf_gpt2_to_tessera(hf, &tied, {}, "mem", &cfg); }),
                       {"mem (config.json)", "lm_head.weight differs"}));
}

TEST(HfGpt2, ImportErrorsNameTheTensor) {
  const HfGpt2Options opts{.n_head = 2};
  StateDict missing = hf_state();
  missing.erase(missing.begin() + 5);  // transformer.h.0.attn.c_attn.weight
  EXPECT_TRUE(mentions(error_of([&] { hf_gpt2_to_tessera(missing, nullptr, opts, "f", nullptr); }),
                       {"f: missing tensor 'transformer.h.0.attn.c_attn.weight'", "[8, 24]"}));

  StateDict wrong = hf_state();
  for (auto& [n, t] : wrong)
    if (n == "transformer.h.1.mlp.c_fc.weight") t = zeros({4 * C, C});  // Linear layout
  EXPECT_TRUE(
      mentions(error_of([&] { hf_gpt2_to_tessera(wrong, nullptr, opts, "f", nullptr); }),
               {"'transformer.h.1.mlp.c_fc.weight'", "[32, 8]", "expected [8, 32]", "Conv1D"}));

  StateDict extra = hf_state();
  extra.emplace_back("transformer.h.0.attn.rotary", zeros({2}));
  EXPECT_TRUE(mentions(error_of([&] { hf_gpt2_to_tessera(extra, nullptr, opts, "f", nullptr); }),
                       {"unexpected tensor 'h.0.attn.rotary'"}));

  StateDict gap = hf_state();
  for (auto& [n, t] : gap)
    if (n.starts_with("transformer.h.1.")) n.replace(14, 1, "7");
  EXPECT_TRUE(mentions(error_of([&] { hf_gpt2_to_tessera(gap, nullptr, opts, "f", nullptr); }),
                       {"blocks h.0 to h.7", "only 2"}));

  StateDict both = hf_state();
  both.emplace_back("wte.weight", zeros({V, C}));
  EXPECT_TRUE(mentions(error_of([&] { hf_gpt2_to_tessera(both, nullptr, opts, "f", nullptr); }),
                       {"'wte.weight' appears both"}));
}

TEST(HfGpt2, ConfigJsonMustAgreeWithTheWeights) {
  TempDir dir;
  write_safetensors(dir.file("model.safetensors"), hf_state());
  write_config(dir, {{"n_head", 2}, {"n_layer", 12}});
  EXPECT_TRUE(mentions(error_of([&] { import_hf_gpt2(dir.path(), nullptr); }),
                       {"config.json", "'n_layer' is 12", "layer count 2"}));
  write_config(dir, {{"n_head", 2}, {"activation_function", "relu"}});
  EXPECT_TRUE(mentions(error_of([&] { import_hf_gpt2(dir.path(), nullptr); }),
                       {"activation_function \"relu\""}));
  write_config(dir, {{"n_head", 3}});
  EXPECT_TRUE(mentions(error_of([&] { import_hf_gpt2(dir.path(), nullptr); }), {"n_head"}));
  EXPECT_TRUE(mentions(error_of([&] { import_hf_gpt2(dir.path(), nullptr, {.n_head = 2}); }),
                       {"n_head 2 was asked for but config.json says 3"}));
  write_bytes(dir.file("config.json"), "{\"n_head\": ");
  EXPECT_TRUE(mentions(error_of([&] { import_hf_gpt2(dir.path(), nullptr); }),
                       {dir.file("config.json"), "not valid JSON"}));
  write_config(dir, {{"n_head", 2}, {"layer_norm_epsilon", 1e-6}});
  GPTConfig cfg;
  import_hf_gpt2(dir.path(), &cfg);
  EXPECT_EQ(cfg.norm_eps, 1e-6);
}

TEST(HfGpt2, ExportWritesHuggingFaceLayoutAndRoundTrips) {
  TempDir dir;
  GPTConfig cfg;
  StateDict ours = hf_gpt2_to_tessera(hf_state(), nullptr, {.n_head = 2}, "mem", &cfg);
  export_hf_gpt2(dir.file("out"), ours, cfg);

  SafetensorsFile st = read_safetensors(dir.file("out/model.safetensors"));
  EXPECT_EQ(st.metadata, (SafetensorsMetadata{{"format", "pt"}})) << "transformers requires it";
  EXPECT_EQ(get(st.tensors, "transformer.wte.weight").shape(), Shape({V, C}));
  EXPECT_EQ(get(st.tensors, "transformer.h.0.mlp.c_fc.weight").shape(), Shape({C, 4 * C}));
  EXPECT_TRUE(same_tensor(get(st.tensors, "transformer.h.1.attn.c_attn.weight"),
                          get(hf_state(), "transformer.h.1.attn.c_attn.weight")));
  EXPECT_FALSE(find_tensor(st.tensors, "lm_head.weight").defined()) << "tied: left out";

  nlohmann::json j = nlohmann::json::parse(testing::read_bytes(dir.file("out/config.json")));
  EXPECT_EQ(j["model_type"], "gpt2");
  EXPECT_EQ(j["architectures"][0], "GPT2LMHeadModel");
  EXPECT_EQ(j["n_embd"], C);
  EXPECT_EQ(j["n_layer"], L);
  EXPECT_EQ(j["n_head"], 2);
  EXPECT_EQ(j["vocab_size"], V);
  EXPECT_EQ(j["n_positions"], T);
  EXPECT_EQ(j["activation_function"], "gelu_new");

  GPTConfig back_cfg;
  StateDict back = import_hf_gpt2(dir.file("out"), &back_cfg);
  EXPECT_EQ(back_cfg.to_json(), cfg.to_json());
  ASSERT_EQ(back.size(), ours.size());
  for (size_t i = 0; i < ours.size(); ++i) {
    EXPECT_EQ(back[i].first, ours[i].first);
    EXPECT_TRUE(same_tensor(back[i].second, ours[i].second)) << ours[i].first;
  }
}

TEST(HfGpt2, ExportRejectsWhatGpt2CannotHold) {
  TempDir dir;
  GPTConfig llama = GPTConfig::preset("llama-tiny");
  EXPECT_TRUE(mentions(error_of([&] { export_hf_gpt2(dir.path(), {}, llama); }),
                       {"Hugging Face GPT-2", "norm is rmsnorm"}));
  GPTConfig cfg;
  StateDict ours = hf_gpt2_to_tessera(hf_state(), nullptr, {.n_head = 2}, "mem", &cfg);
  ours.emplace_back("rope.cache", zeros({2}));
  EXPECT_TRUE(mentions(error_of([&] { export_hf_gpt2(dir.path(), ours, cfg); }),
                       {"'rope.cache'", "no counterpart"}));
  ours.pop_back();
  ours.erase(ours.begin());
  EXPECT_TRUE(mentions(error_of([&] { export_hf_gpt2(dir.path(), ours, cfg); }),
                       {"missing tensor 'wte.weight'"}));
}

}  // namespace
}  // namespace tessera::nn
