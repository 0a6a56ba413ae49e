#include "tessera/plan/workload.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/json_depth.h"
#include "tessera/plan/detail/text.h"

namespace tessera::plan {

namespace {

// The counts in T: int64_t for the exact figure, double for one that cannot overflow (what
// Workload::validate compares against its bound). The divisions by tp stay integral.
template <class T>
T block_parameters_as(const nn::GPTConfig& m, int tp) {
  const T h = T(m.n_embd), f = T(m.ffn_dim() / tp), h_tp = T(m.n_embd / tp);
  const T norm = m.norm == nn::NormKind::layernorm && m.bias ? 2 * h : h;
  const T qkv = T((m.n_head + 2 * m.n_kv_head) * m.head_dim() / tp);
  T n = 2 * norm + qkv * h + h * h_tp;
  n += m.mlp == nn::MlpKind::gelu ? 2 * h * f : 3 * h * f;
  if (m.bias) n += qkv + h + (m.mlp == nn::MlpKind::gelu ? f + h : 2 * f + h);
  return n;
}

template <class T>
T parameter_count_as(const nn::GPTConfig& m) {
  const T h = T(m.n_embd), V = T(m.padded_vocab_size());
  const T norm = m.norm == nn::NormKind::layernorm && m.bias ? 2 * h : h;
  T total = T(m.n_layer) * block_parameters_as<T>(m, 1) + V * h + norm;
  if (m.position == nn::PositionKind::learned) total += T(m.block_size) * h;
  if (!m.tie_embeddings) total += V * h;
  return total;
}

}  // namespace

void Workload::validate() const {
  model.validate();
  // Sizes whose byte counts a plan's 64-bit sums hold: 10^15 parameters is 1,000 times the
  // largest dense model published, 2^30 tokens a step 64 times Llama 3's 16M, 2^16 layers 500
  // times its 126.
  const double parameters = parameter_count_as<double>(model);
  TESSERA_CHECK(parameters <= 1e15, "plan: the model has about ", detail::significant(parameters),
                " parameters, more than 10^15; check its sizes (", model.n_layer, " layers, width ",
                model.n_embd, ", MLP ", model.ffn_dim(), ", vocabulary ", model.vocab_size, ")");
  TESSERA_CHECK(model.n_layer <= 65536, "plan: ", model.n_layer, " layers is more than 2^16");
  TESSERA_CHECK(seq_len >= 1 && seq_len <= model.block_size, "plan: sequence length ", seq_len,
                " must be in [1, the model's block_size ", model.block_size, "]");
  TESSERA_CHECK(global_batch >= 1 && global_batch <= (int64_t(1) << 30),
                "plan: global batch must be in [1, 2^30] sequences, got ", global_batch);
  TESSERA_CHECK(double(global_batch) * double(seq_len) <= double(int64_t(1) << 30), "plan: a step ",
                "of ", global_batch, " x ", seq_len, " tokens is more than 2^30 tokens");
  // 1e16 is 300 times the largest runs published (Llama 3: 15.6T tokens).
  TESSERA_CHECK(std::isfinite(train_tokens) && train_tokens >= 0 && train_tokens <= 1e16,
                "plan: tokens to train must be in [0, 1e16], got ", train_tokens);
}

namespace {

// A GPT-2/GPT-3 shape as Megatron-LM trains it: GELU, learned positions, LayerNorm with
// biases, the head tied to the embedding, vocabulary 51,200, sequences of 2,048.
nn::GPTConfig megatron(int64_t layers, int64_t hidden, int64_t heads) {
  nn::GPTConfig c;
  c.n_layer = layers;
  c.n_embd = hidden;
  c.n_head = c.n_kv_head = heads;
  c.vocab_size = 51200;
  c.vocab_multiple = 128;
  c.block_size = 2048;
  return c;
}

nn::GPTConfig llama(int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads, int64_t ffn,
                    int64_t vocab, int64_t context) {
  nn::GPTConfig c;
  c.n_layer = layers;
  c.n_embd = hidden;
  c.n_head = heads;
  c.n_kv_head = kv_heads;
  c.ffn_hidden = ffn;
  c.vocab_size = vocab;
  c.vocab_multiple = 128;
  c.block_size = context;
  c.norm = nn::NormKind::rmsnorm;
  c.mlp = nn::MlpKind::swiglu;
  c.position = nn::PositionKind::rope;
  c.tie_embeddings = false;
  c.bias = false;
  return c;
}

struct NamedModel {
  const char* name;
  nn::GPTConfig config;
};

// Shapes from the papers and model cards: Narayanan et al. 2021 Table 1 and §5.1 (GPT-3's
// 175B); Llama 2 (Touvron et al. 2023), Llama 3 / 3.1 (Dubey et al. 2024).
const std::vector<NamedModel>& named_models() {
  static const std::vector<NamedModel> models = {
      {"gpt3-175b", megatron(96, 12288, 96)},
      {"megatron-1.7b", megatron(24, 2304, 24)},
      {"megatron-3.6b", megatron(30, 3072, 32)},
      {"megatron-7.5b", megatron(36, 4096, 32)},
      {"megatron-18b", megatron(40, 6144, 48)},
      {"megatron-39b", megatron(48, 8192, 64)},
      {"megatron-76b", megatron(60, 10240, 80)},
      {"megatron-146b", megatron(80, 12288, 96)},
      {"megatron-310b", megatron(96, 16384, 128)},
      {"megatron-530b", megatron(105, 20480, 128)},
      {"megatron-1t", megatron(128, 25600, 160)},
      {"llama-7b-like", llama(32, 4096, 32, 32, 11008, 32000, 4096)},
      {"llama-13b-like", llama(40, 5120, 40, 40, 13824, 32000, 4096)},
      {"llama3-8b-like", llama(32, 4096, 32, 8, 14336, 128256, 8192)},
      {"llama-70b-like", llama(80, 8192, 64, 8, 28672, 32000, 4096)},
      {"llama-405b-like", llama(126, 16384, 128, 8, 53248, 128256, 8192)},
  };
  return models;
}

}  // namespace

std::vector<std::string> plan_model_names() {
  std::vector<std::string> names;
  for (const NamedModel& m : named_models()) names.push_back(m.name);
  for (const std::string& n : nn::GPTConfig::preset_names()) names.push_back(n);
  return names;
}

nn::GPTConfig plan_model(const std::string& name) {
  for (const NamedModel& m : named_models())
    if (name == m.name) return m.config;
  for (const std::string& n : nn::GPTConfig::preset_names())
    if (name == n) return nn::GPTConfig::preset(n);
  std::string known;
  for (const std::string& n : plan_model_names()) known += (known.empty() ? "" : ", ") + n;
  tessera::detail::throw_error("plan: unknown model '", name, "' (presets: ", known,
                               "; or give a Hugging Face config.json)");
}

nn::GPTConfig model_from_hf_config(const std::string& path) {
  const nlohmann::json j = plan::detail::parse_json(read_text_file(path), path);
  TESSERA_CHECK(j.is_object(), path, ": a config.json must be an object");
  auto has = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  auto integer = [&](std::initializer_list<const char*> keys) -> int64_t {
    for (const char* key : keys)
      if (has(key)) {
        TESSERA_CHECK(j[key].is_number_integer() && j[key].get<int64_t>() > 0, path, ": '", key,
                      "' must be a positive integer, got ", j[key].dump());
        return j[key].get<int64_t>();
      }
    std::string names;
    for (const char* key : keys) names += (names.empty() ? "'" : " or '") + std::string(key) + "'";
    tessera::detail::throw_error(path, ": no ", names);
  };
  const std::string type = has("model_type") && j["model_type"].is_string()
                               ? j["model_type"].get<std::string>()
                               : std::string();
  nn::GPTConfig c;
  c.vocab_size = integer({"vocab_size"});
  c.vocab_multiple = 128;
  if (type == "gpt2") {
    c.n_layer = integer({"n_layer", "num_hidden_layers"});
    c.n_embd = integer({"n_embd", "hidden_size"});
    c.n_head = c.n_kv_head = integer({"n_head", "num_attention_heads"});
    c.block_size = integer({"n_positions", "n_ctx", "max_position_embeddings"});
    if (has("n_inner")) c.ffn_hidden = integer({"n_inner"});
    c.validate();
    return c;
  }
  // Llama and its relatives (Mistral, Qwen2, ...): RMSNorm, SwiGLU, RoPE, no biases.
  c.n_layer = integer({"num_hidden_layers"});
  c.n_embd = integer({"hidden_size"});
  c.n_head = integer({"num_attention_heads"});
  c.n_kv_head = has("num_key_value_heads") ? integer({"num_key_value_heads"}) : c.n_head;
  c.ffn_hidden = integer({"intermediate_size"});
  c.block_size = integer({"max_position_embeddings"});
  c.norm = nn::NormKind::rmsnorm;
  c.mlp = nn::MlpKind::swiglu;
  c.position = nn::PositionKind::rope;
  c.bias = false;
  c.tie_embeddings = has("tie_word_embeddings") && j["tie_word_embeddings"].is_boolean() &&
                     j["tie_word_embeddings"].get<bool>();
  if (has("rope_theta") && j["rope_theta"].is_number())
    c.rope_theta = j["rope_theta"].get<double>();
  if (has("rms_norm_eps") && j["rms_norm_eps"].is_number())
    c.norm_eps = j["rms_norm_eps"].get<double>();
  TESSERA_CHECK(c.n_embd % c.n_head == 0, path, ": hidden_size ", c.n_embd,
                " is not a multiple of num_attention_heads ", c.n_head);
  TESSERA_CHECK(c.n_head % c.n_kv_head == 0, path, ": num_attention_heads ", c.n_head,
                " is not a multiple of num_key_value_heads ", c.n_kv_head);
  c.validate();
  return c;
}

int64_t block_parameters(const nn::GPTConfig& m, int tp) {
  return block_parameters_as<int64_t>(m, tp);
}

int64_t parameter_count(const nn::GPTConfig& m) {
  return parameter_count_as<int64_t>(m);
}

FlopsPerToken flops_per_token(const nn::GPTConfig& m, int64_t s) {
  const double h = double(m.n_embd), d = double(m.head_dim()), f = double(m.ffn_dim());
  const double qkv = double(m.n_head + 2 * m.n_kv_head) * d;
  const double mlp = m.mlp == nn::MlpKind::gelu ? 2 * h * f : 3 * h * f;
  FlopsPerToken out;
  out.layers = double(m.n_layer) * 2 * (h * qkv + h * h + mlp);
  // Q K^T and P V: 2 s d multiply-adds per head and token each, over all n_head query heads.
  out.attention = double(m.n_layer) * 2 * 2 * double(s) * double(m.n_head) * d;
  out.logits = 2 * h * double(m.padded_vocab_size());
  return out;
}

double training_flops(const nn::GPTConfig& m, int64_t batch, int64_t s, double recompute_fraction) {
  const FlopsPerToken f = flops_per_token(m, s);
  const double tokens = double(batch) * double(s);
  return tokens * ((3 + recompute_fraction) * (f.layers + f.attention) + 3 * f.logits);
}

double narayanan_flops(double B, double s, double l, double h, double V) {
  return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

double narayanan_flops_no_recompute(double B, double s, double l, double h, double V) {
  return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
}

}  // namespace tessera::plan
