#pragma once
// What is being planned: a model, its sequence length, the global batch and the tokens to
// train on, in a precision. Models come from the engine's presets, from the planning presets
// below (published shapes, too large to train here), or from a Hugging Face config.json.
//
// FLOPs, two ways:
//  - narayanan_flops: Narayanan et al. 2021, eq. 3, exactly: an iteration of B sequences of s
//    tokens on l layers of width h with vocabulary V under full recomputation,
//        96 B s l h^2 (1 + s / 6h + V / 16 l h).
//    Without recomputation the layers run three passes instead of four, but the logits layer
//    is never recomputed, so the factor is not simply 72: 72 B s l h^2 (1 + s / 6h + V / 12 l h)
//    (writing 72 into eq. 3 undercounts the logit GEMMs by a quarter).
//  - flops_per_token: from the model's own shapes (GQA's narrower k and v, SwiGLU's three
//    f-wide matrices, an untied head), which equals eq. 3 for a GPT-2-style block. SwiGLU
//    changes the MLP term from 16 h^2 to 6 h f per token and forward pass (= 16 h^2 at Llama's
//    f = 8h/3); GQA changes qkv from 6 h^2 to 2 h (H + 2 Hkv) d.
// Attention's score and value products are counted over the whole s x s square, as eq. 3
// does, although a causal kernel (Tessera's) skips the masked half.

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/nn/gpt_config.h"
#include "tessera/nn/optim/mixed_precision.h"
#include "tessera/nn/recompute.h"

namespace tessera::plan {

struct Workload {
  nn::GPTConfig model;
  std::string model_name;  // how it was named: a preset, or the config file
  int64_t seq_len = 2048;
  int64_t global_batch = 512;  // sequences per step
  double train_tokens = 0;     // 0: no end (days, GPU-hours and cost are not given)
  nn::Precision precision = nn::Precision::bf16;

  int64_t tokens_per_step() const { return global_batch * seq_len; }
  // Throws naming the field: sizes out of range, a sequence past the model's block_size.
  void validate() const;
};

// Planning presets: "gpt3-175b", the Megatron-LM 2021 models ("megatron-1.7b" ...
// "megatron-1t", with "megatron-530b"), Llama-style "llama-7b-like", "llama-13b-like",
// "llama3-8b-like", "llama-70b-like", "llama-405b-like", and the engine's presets
// (nn::GPTConfig::preset). Throws listing the names otherwise.
nn::GPTConfig plan_model(const std::string& name);
std::vector<std::string> plan_model_names();

// A Hugging Face config.json (GPT2LMHeadModel or a Llama-style model: num_hidden_layers,
// hidden_size, num_attention_heads, num_key_value_heads, intermediate_size, vocab_size,
// max_position_embeddings, tie_word_embeddings, rope_theta, rms_norm_eps). Throws naming the
// file and the key that is missing or wrong.
nn::GPTConfig model_from_hf_config(const std::string& path);

// Total parameters of the single-process model (the padded vocabulary included).
int64_t parameter_count(const nn::GPTConfig& model);
// One block's parameters on one tensor-parallel rank of `tp` (block.cpp): two norms
// (replicated), the fused qkv projection and the MLP's input projections split by rows, the
// output projections by columns with their biases replicated.
int64_t block_parameters(const nn::GPTConfig& model, int tp = 1);

struct FlopsPerToken {
  double layers = 0;     // every block's GEMMs, one forward pass
  double attention = 0;  // every block's score and value products, one forward pass
  double logits = 0;     // the head, one forward pass
  double forward() const { return layers + attention + logits; }
};
FlopsPerToken flops_per_token(const nn::GPTConfig& model, int64_t seq_len);

// One training step of B sequences: forward + backward (twice the forward), plus a second
// forward of the blocks under full recomputation (the head is never recomputed). Selective
// recomputation adds no GEMM. `recompute_fraction`: the share of blocks recomputed (full:N).
double training_flops(const nn::GPTConfig& model, int64_t batch, int64_t seq_len,
                      double recompute_fraction);

// Narayanan et al. 2021, eq. 3 (full recomputation), and its three-pass form.
double narayanan_flops(double B, double s, double l, double h, double V);
double narayanan_flops_no_recompute(double B, double s, double l, double h, double V);

}  // namespace tessera::plan
