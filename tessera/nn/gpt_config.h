#pragma once
// GPTConfig: every shape and choice of a GPT-2 or Llama-style model, resolvable from a preset,
// a JSON object, or both (JSON overrides the preset), and printable back as JSON.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace tessera::nn {

enum class NormKind { layernorm, rmsnorm };
enum class MlpKind { gelu, swiglu };
enum class PositionKind { learned, rope };

struct GPTConfig {
  int64_t vocab_size = 50257;
  int64_t vocab_multiple = 64;  // the embedding table is padded up to a multiple of this
  int64_t block_size = 1024;    // the longest sequence (learned positions, RoPE cache)
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_kv_head = 12;  // < n_head: grouped-query attention
  int64_t n_embd = 768;
  int64_t ffn_hidden = 0;  // 0: 4 * n_embd (gelu), or Llama's rule for swiglu (see ffn_dim)
  NormKind norm = NormKind::layernorm;
  MlpKind mlp = MlpKind::gelu;
  PositionKind position = PositionKind::learned;
  bool tie_embeddings = true;
  bool bias = true;  // biases in linear layers and LayerNorm
  double dropout = 0.0;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  uint64_t init_seed = 1337;
  // How the blocks' linear weights are stored: "" (full precision) or "q8_0" (weight-only
  // INT8, ops/quantized_linear.h; inference only). Embeddings, norms and the head stay as
  // they are.
  std::string quantization;

  int64_t padded_vocab_size() const;
  int64_t head_dim() const { return n_embd / n_head; }
  // The MLP width: ffn_hidden if set; 4*C for gelu; for swiglu 2/3 of 4*C rounded up to a
  // multiple of 64 (Llama's rule, keeping the parameter count of a 4C gelu MLP).
  int64_t ffn_dim() const;
  // Throws tessera::Error naming the offending field and value.
  void validate() const;

  nlohmann::json to_json() const;
  // Starts from `base` and overrides the keys present; an unknown key or a wrong type throws
  // naming the key.
  static GPTConfig from_json(const nlohmann::json& j, const GPTConfig& base);
  static GPTConfig from_json(const nlohmann::json& j);

  // Presets: "gpt2-d12" (124M), "gpt2-d24" (350M), "gpt2-d36" (774M), "gpt2-d48" (1.5B),
  // "llama-d12" (Llama-style at GPT-2 small's width), and small ones for tests and the
  // default CPU run: "gpt2-tiny", "llama-tiny".
  static GPTConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();
};

}  // namespace tessera::nn
