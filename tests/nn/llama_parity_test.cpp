// Llama parity with transformers: small LlamaForCausalLM models (GQA 4 over 2 heads, SwiGLU,
// RMSNorm, RoPE theta 50,000; untied and tied; tools/make_llama_fixture.py) import through
// import_hf_llama, and Tessera's logits and greedy continuation match what PyTorch computed;
// export writes back the same tensors and a config.json transformers reads.

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "nn/gpt2_parity_fixture.h"
#include "nn/hf_llama_folder.h"
#include "nn/io_test_util.h"
#include "tessera/core/file_io.h"
#include "tessera/nn/io/hf_llama.h"
#include "tessera/nn/io/safetensors.h"

namespace tessera::nn {
namespace {

using testing::relative_error;

const std::string kFixture = std::string(TESSERA_TEST_FIXTURES) + "/nn/fixtures/llama_parity/";

struct Llama {
  GPTConfig config;
  std::unique_ptr<GPT> model;
  SafetensorsFile golden;
  Tensor golden_tensor(const std::string& name) const {
    for (const auto& [n, t] : golden.tensors)
      if (n == name) return t;
    ADD_FAILURE() << "golden.safetensors has no " << name;
    return Tensor();
  }
};

Llama load(const std::string& variant) {
  Llama l;
  const StateDict weights = import_hf_llama(kFixture + variant, &l.config);
  l.model = std::make_unique<GPT>(l.config);
  l.model->load_state_dict(weights);
  l.model->eval();
  l.golden = read_safetensors(kFixture + variant + "/golden.safetensors");
  return l;
}

TEST(LlamaParity, ConfigComesFromConfigJson) {
  const Llama l = load("untied");
  EXPECT_EQ(l.config.n_layer, 2);
  EXPECT_EQ(l.config.n_head, 4);
  EXPECT_EQ(l.config.n_kv_head, 2);
  EXPECT_EQ(l.config.n_embd, 32);
  EXPECT_EQ(l.config.ffn_dim(), 80);
  EXPECT_EQ(l.config.vocab_size, 100);
  EXPECT_EQ(l.config.padded_vocab_size(), 128);
  EXPECT_DOUBLE_EQ(l.config.rope_theta, 50000.0);  // from rope_parameters (transformers 5)
  EXPECT_DOUBLE_EQ(l.config.norm_eps, 1e-6);
  EXPECT_FALSE(l.config.tie_embeddings);
  EXPECT_TRUE(load("tied").config.tie_embeddings);
}

// The logits over the real vocabulary. fp32 on both sides: the sums run in other orders (GEMM
// blocking, RMSNorm and softmax reductions, RoPE's angles in double here), a few ulps per
// operation through two blocks; 1e-4 of the logits' scale, as the GPT-2 parity test.
TEST(LlamaParity, LogitsMatchTransformers) {
  for (const char* variant : {"untied", "tied"}) {
    const Llama l = load(variant);
    const Tensor logits = l.model->forward(l.golden_tensor("inputs"));
    ASSERT_EQ(logits.shape(), (Shape{2, 12, 128})) << variant;
    const double err = relative_error(ops::narrow(logits, 2, 0, 100), l.golden_tensor("logits"));
    EXPECT_LT(err, 1e-4) << variant;
    std::printf("  %s: logits relative error %.2e\n", variant, err);
  }
}

// 12 greedy tokens after the prompt, through the KV cache: exactly transformers' (the weights
// were drawn with std 0.3, so each argmax is decided by a margin far above the logits' error).
TEST(LlamaParity, GreedyContinuationMatchesTransformers) {
  for (const char* variant : {"untied", "tied"}) {
    Llama l = load(variant);
    const Tensor prompt = ops::reshape(l.golden_tensor("prompt"), {1, -1});
    GenerateOptions o;
    o.max_new_tokens = 12;
    o.sampling.temperature = 0;
    const Tensor out = generate(*l.model, prompt, o);
    const std::vector<int64_t> all = to_vector<int64_t>(out);
    const std::vector<int64_t> got(all.begin() + prompt.size(1), all.end());
    EXPECT_EQ(got, to_vector<int64_t>(l.golden_tensor("greedy"))) << variant;
  }
}

// Export writes the tensors transformers saved, bit for bit, and a config.json that reads back
// as the same config.
TEST(LlamaParity, ExportRoundTrips) {
  namespace fs = std::filesystem;
  for (const char* variant : {"untied", "tied"}) {
    const Llama l = load(variant);
    const fs::path dir =
        fs::temp_directory_path() / ("tessera_llama_export_" + std::string(variant));
    fs::remove_all(dir);
    export_hf_llama(dir.string(), l.model->state_dict(), l.config, /*eot_id=*/2);
    const SafetensorsFile theirs = read_safetensors(kFixture + variant + "/model.safetensors");
    const SafetensorsFile ours = read_safetensors((dir / "model.safetensors").string());
    ASSERT_EQ(ours.tensors.size(), theirs.tensors.size()) << variant;
    for (const auto& [name, t] : theirs.tensors) {
      bool found = false;
      for (const auto& [n, o] : ours.tensors)
        if (n == name) {
          found = true;
          EXPECT_EQ(relative_error(o, t), 0.0) << variant << " " << name;
        }
      EXPECT_TRUE(found) << variant << ": export has no " << name;
    }
    GPTConfig back;
    import_hf_llama(dir.string(), &back);
    EXPECT_EQ(back.to_json(), l.config.to_json()) << variant;
    const nlohmann::json cfg =
        nlohmann::json::parse(read_text_file((dir / "config.json").string()));
    EXPECT_EQ(cfg["eos_token_id"], 2);
    fs::remove_all(dir);
  }
}

// A folder as transformers shards a large model (bf16, three files and their index) reads by
// range as the weights it holds: every tensor under Tessera's name, q/k/v stacked and the
// vocabulary padded, cast to f32 exactly as bf16 widens. A tensor stored in a file the index
// does not name for it, or a shard that is missing, is refused naming the file.
TEST(LlamaParity, AShardedBf16FolderReadsByRangeAsItsWeights) {
  namespace fs = std::filesystem;
  const Llama l = load("untied");
  const fs::path dir = fs::temp_directory_path() / "tessera_llama_shards";
  fs::remove_all(dir);
  testing::write_hf_llama_shards(dir.string(), l.model->state_dict(), l.config, 3, DType::bf16);
  GPTConfig config;
  const std::shared_ptr<const TensorSource> source = hf_llama_source(dir.string(), &config);
  EXPECT_EQ(config.to_json(), l.config.to_json());
  ASSERT_EQ(source->tensors().size(), l.model->state_dict().size());
  for (const auto& [name, t] : l.model->state_dict()) {
    const TensorSource::Stacked* stored = source->find(name);
    ASSERT_NE(stored, nullptr) << name;
    EXPECT_EQ(stored->dtype, DType::bf16) << name;
    Tensor got = empty(t.shape());
    source->read(*stored, 0, got);
    EXPECT_TRUE(testing::same_tensor(got, ops::cast(ops::cast(t, DType::bf16), DType::f32)))
        << name;
  }

  auto refused = [&](const std::string& says) {
    try {
      hf_llama_source(dir.string(), nullptr);
      ADD_FAILURE() << "accepted: " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  const fs::path index = dir / "model.safetensors.index.json";
  const std::string kept = read_text_file(index.string());
  nlohmann::json moved = nlohmann::json::parse(kept);
  moved["weight_map"]["model.norm.weight"] = testing::hf_shard_name(0, 3);
  write_file_atomic(index.string(), moved.dump());
  refused("tensor 'model.norm.weight' is not where " + index.string() + " says");
  write_file_atomic(index.string(), kept);
  fs::remove(dir / testing::hf_shard_name(1, 3));
  refused((dir / testing::hf_shard_name(1, 3)).string());
  fs::remove_all(dir);
}

// What Tessera computes differently is refused by name, never loaded into another model.
TEST(LlamaParity, UnsupportedConfigsAreRefused) {
  nlohmann::json c = nlohmann::json::parse(read_text_file(kFixture + "untied/config.json"));
  auto refused = [](nlohmann::json cfg, const std::string& says) {
    try {
      hf_llama_config_to_tessera(cfg, "config.json");
      ADD_FAILURE() << "accepted: " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  nlohmann::json x = c;
  x["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  refused(x, "'rope_scaling' is");
  x = c;
  x["attention_bias"] = true;
  refused(x, "'attention_bias' is true");
  x = c;
  x["hidden_act"] = "gelu";
  refused(x, "'hidden_act' is \"gelu\"");
  x = c;
  x["head_dim"] = 16;
  refused(x, "head_dim 16 is not hidden_size / num_attention_heads = 8");
  x = c;
  x["num_key_value_heads"] = 3;
  refused(x, "num_attention_heads 4 is not a multiple of num_key_value_heads 3");
  x = c;
  x["model_type"] = "gpt2";
  x.erase("architectures");
  refused(x, "not a Llama config");
}

}  // namespace
}  // namespace tessera::nn
