#include "tessera/nn/gpt_config.h"

#include <limits>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"

namespace tessera::nn {

namespace {

const char* norm_name(NormKind k) {
  return k == NormKind::layernorm ? "layernorm" : "rmsnorm";
}
const char* mlp_name(MlpKind k) {
  return k == MlpKind::gelu ? "gelu" : "swiglu";
}
const char* position_name(PositionKind k) {
  return k == PositionKind::learned ? "learned" : "rope";
}

template <class E>
E parse_enum(const nlohmann::json& v, const char* key,
             std::initializer_list<std::pair<const char*, E>> options) {
  TESSERA_CHECK(v.is_string(), "config: '", key, "' must be a string, got ", v.dump());
  std::string s = v.get<std::string>();
  std::string allowed;
  for (const auto& [name, value] : options) {
    if (s == name) return value;
    allowed += allowed.empty() ? name : std::string(", ") + name;
  }
  detail::throw_error("config: '", key, "' is '", s, "'; expected one of ", allowed);
}

GPTConfig gpt2(int64_t layers, int64_t heads, int64_t width) {
  GPTConfig c;
  c.n_layer = layers;
  c.n_head = c.n_kv_head = heads;
  c.n_embd = width;
  return c;
}

GPTConfig llama_style(GPTConfig c, int64_t kv_heads) {
  c.n_kv_head = kv_heads;
  c.norm = NormKind::rmsnorm;
  c.mlp = MlpKind::swiglu;
  c.position = PositionKind::rope;
  c.tie_embeddings = false;
  c.bias = false;
  c.norm_eps = 1e-5;
  return c;
}

}  // namespace

int64_t GPTConfig::padded_vocab_size() const {
  return (vocab_size + vocab_multiple - 1) / vocab_multiple * vocab_multiple;
}

int64_t GPTConfig::ffn_dim() const {
  if (ffn_hidden > 0) return ffn_hidden;
  if (mlp == MlpKind::gelu) return 4 * n_embd;
  int64_t h = 2 * (4 * n_embd) / 3;
  return (h + 63) / 64 * 64;
}

void GPTConfig::validate() const {
  // Every size fits int32 (as llm.c's header stores them), so that what is derived from them
  // (the padded vocabulary, the MLP width, the weights' element counts) cannot overflow int64:
  // vocab_size 2^63 - 1 overflowed padded_vocab_size() (found with fuzz/train_config).
  static constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();
  auto at_most = [](int64_t v, const char* name) {
    TESSERA_CHECK(v <= kMaxSize, "config: ", name, " is ", v, ", more than the largest size ",
                  "Tessera supports (", kMaxSize, ")");
  };
  auto positive = [&](int64_t v, const char* name) {
    TESSERA_CHECK(v > 0, "config: ", name, " must be positive, got ", v);
    at_most(v, name);
  };
  positive(vocab_size, "vocab_size");
  positive(vocab_multiple, "vocab_multiple");
  positive(block_size, "block_size");
  positive(n_layer, "n_layer");
  positive(n_head, "n_head");
  positive(n_kv_head, "n_kv_head");
  positive(n_embd, "n_embd");
  TESSERA_CHECK(ffn_hidden >= 0, "config: ffn_hidden must be >= 0, got ", ffn_hidden);
  at_most(ffn_hidden, "ffn_hidden");
  TESSERA_CHECK(n_embd % n_head == 0, "config: n_embd (", n_embd, ") must be divisible by n_head (",
                n_head, ")");
  TESSERA_CHECK(n_head % n_kv_head == 0, "config: n_head (", n_head,
                ") must be divisible by n_kv_head (", n_kv_head, ")");
  TESSERA_CHECK(position != PositionKind::rope || head_dim() % 2 == 0,
                "config: RoPE needs an even ", "head dim, got n_embd/n_head = ", head_dim());
  TESSERA_CHECK(dropout >= 0.0 && dropout < 1.0, "config: dropout must be in [0, 1), got ",
                dropout);
  TESSERA_CHECK(norm_eps > 0.0, "config: norm_eps must be positive, got ", norm_eps);
  TESSERA_CHECK(rope_theta > 0.0, "config: rope_theta must be positive, got ", rope_theta);
  TESSERA_CHECK(quantization.empty() || quantization == "q8_0",
                "config: quantization must be \"\" or \"q8_0\", got '", quantization, "'");
}

nlohmann::json GPTConfig::to_json() const {
  nlohmann::json j = {{"vocab_size", vocab_size},
                      {"vocab_multiple", vocab_multiple},
                      {"block_size", block_size},
                      {"n_layer", n_layer},
                      {"n_head", n_head},
                      {"n_kv_head", n_kv_head},
                      {"n_embd", n_embd},
                      {"ffn_hidden", ffn_hidden},
                      {"norm", norm_name(norm)},
                      {"mlp", mlp_name(mlp)},
                      {"position", position_name(position)},
                      {"tie_embeddings", tie_embeddings},
                      {"bias", bias},
                      {"dropout", dropout},
                      {"norm_eps", norm_eps},
                      {"rope_theta", rope_theta},
                      {"init_seed", init_seed}};
  if (!quantization.empty()) j["quantization"] = quantization;
  return j;
}

GPTConfig GPTConfig::from_json(const nlohmann::json& j, const GPTConfig& base) {
  TESSERA_CHECK(j.is_object(), "config: expected a JSON object, got ", j.dump());
  GPTConfig c = base;
  for (const auto& item : j.items()) {
    // Named references rather than a structured binding: lambdas below capture them (clang
    // before 16, the fuzz build's compiler, cannot capture bindings).
    const std::string& key = item.key();
    const nlohmann::json& v = item.value();
    auto integer = [&](int64_t& field) {
      TESSERA_CHECK(v.is_number_integer(), "config: '", key, "' must be an integer, got ",
                    v.dump());
      field = v.get<int64_t>();
    };
    auto number = [&](double& field) {
      TESSERA_CHECK(v.is_number(), "config: '", key, "' must be a number, got ", v.dump());
      field = v.get<double>();
    };
    auto boolean = [&](bool& field) {
      TESSERA_CHECK(v.is_boolean(), "config: '", key, "' must be true or false, got ", v.dump());
      field = v.get<bool>();
    };
    if (key == "vocab_size")
      integer(c.vocab_size);
    else if (key == "vocab_multiple")
      integer(c.vocab_multiple);
    else if (key == "block_size")
      integer(c.block_size);
    else if (key == "n_layer")
      integer(c.n_layer);
    else if (key == "n_head")
      integer(c.n_head);
    else if (key == "n_kv_head")
      integer(c.n_kv_head);
    else if (key == "n_embd")
      integer(c.n_embd);
    else if (key == "ffn_hidden")
      integer(c.ffn_hidden);
    else if (key == "norm")
      c.norm = parse_enum<NormKind>(
          v, "norm", {{"layernorm", NormKind::layernorm}, {"rmsnorm", NormKind::rmsnorm}});
    else if (key == "mlp")
      c.mlp = parse_enum<MlpKind>(v, "mlp", {{"gelu", MlpKind::gelu}, {"swiglu", MlpKind::swiglu}});
    else if (key == "position")
      c.position = parse_enum<PositionKind>(
          v, "position", {{"learned", PositionKind::learned}, {"rope", PositionKind::rope}});
    else if (key == "tie_embeddings")
      boolean(c.tie_embeddings);
    else if (key == "bias")
      boolean(c.bias);
    else if (key == "dropout")
      number(c.dropout);
    else if (key == "norm_eps")
      number(c.norm_eps);
    else if (key == "rope_theta")
      number(c.rope_theta);
    else if (key == "quantization") {
      TESSERA_CHECK(v.is_string(), "config: 'quantization' must be a string, got ", v.dump());
      c.quantization = v.get<std::string>();
    } else if (key == "init_seed") {
      TESSERA_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0),
                    "config: 'init_seed' must be a non-negative integer, got ", v.dump());
      c.init_seed = v.get<uint64_t>();
    } else {
      detail::throw_error("config: unknown key '", key, "'");
    }
  }
  return c;
}

GPTConfig GPTConfig::from_json(const nlohmann::json& j) {
  return from_json(j, GPTConfig());
}

GPTConfig GPTConfig::preset(const std::string& name) {
  if (name == "gpt2-d12") return gpt2(12, 12, 768);
  if (name == "gpt2-d24") return gpt2(24, 16, 1024);
  if (name == "gpt2-d36") return gpt2(36, 20, 1280);
  if (name == "gpt2-d48") return gpt2(48, 25, 1600);
  if (name == "llama-d12") return llama_style(gpt2(12, 12, 768), 4);
  if (name == "gpt2-tiny") {
    GPTConfig c = gpt2(4, 4, 128);
    c.block_size = 256;
    return c;
  }
  if (name == "llama-tiny") {
    GPTConfig c = llama_style(gpt2(4, 4, 128), 2);
    c.block_size = 256;
    return c;
  }
  std::string names;
  for (const std::string& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  detail::throw_error("unknown model preset '", name, "' (expected one of ", names, ")");
}

std::vector<std::string> GPTConfig::preset_names() {
  return {"gpt2-d12", "gpt2-d24", "gpt2-d36", "gpt2-d48", "llama-d12", "gpt2-tiny", "llama-tiny"};
}

}  // namespace tessera::nn
