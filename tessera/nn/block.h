#pragma once
// The transformer block and its two halves.
//
// CausalSelfAttention: a fused q/k/v projection c_attn [(H + 2 Hkv) D, C] (rows: the H query
// heads, then the Hkv key heads, then the Hkv value heads, D rows each), learned or rotary
// positions, grouped-query attention when n_kv_head < n_head, the output projection c_proj
// [C, C], then residual dropout.
// MLP: GPT-2's c_proj(gelu(c_fc(x))) or Llama's SwiGLU c_proj(silu(w_gate(x)) * w_up(x)),
// then residual dropout.
// Block (pre-norm): x + attn(ln_1(x)), then x + mlp(ln_2(x)), with LayerNorm or RMSNorm.
// Linear layers carry biases when config.bias.

#include <cstdint>
#include <memory>

#include "tessera/core/tensor.h"
#include "tessera/nn/init.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

// One layer's KV-cache buffers, [B, Hkv, capacity, D]; keys are stored after RoPE, so a
// cached key is never rotated again.
struct LayerKV {
  Tensor k, v;
};

class CausalSelfAttention : public Module {
 public:
  explicit CausalSelfAttention(const LayerContext& ctx);

  // x [B, T, C] at positions pos .. pos + T - 1 -> [B, T, C]. Without a cache (training),
  // pos must be 0 and the T tokens attend among themselves. With one (inference, under
  // NoGradGuard), this step's keys and values are written to positions [pos, pos + T) of kv
  // and each query attends to every cached position up to its own.
  Tensor forward(const Tensor& x, LayerKV* kv = nullptr, int64_t pos = 0) const;

 private:
  int64_t n_head_, n_kv_head_, head_dim_;
  bool rope_;
  double rope_theta_;
  std::shared_ptr<Linear> c_attn_, c_proj_;
  std::shared_ptr<Dropout> resid_dropout_;
};

class MLP : public Module {
 public:
  explicit MLP(const LayerContext& ctx);
  // x [..., C] -> [..., C].
  Tensor forward(const Tensor& x) const;

 private:
  MlpKind kind_;
  std::shared_ptr<Linear> c_fc_, w_gate_, w_up_, c_proj_;
  std::shared_ptr<Dropout> dropout_;
};

// The norm layer config.norm asks for, over n_embd, with config.bias and config.norm_eps.
std::shared_ptr<NormLayer> make_norm(const GPTConfig& config, DType dtype);

class Block : public Module {
 public:
  explicit Block(const LayerContext& ctx);
  // See CausalSelfAttention::forward for kv and pos.
  Tensor forward(const Tensor& x, LayerKV* kv = nullptr, int64_t pos = 0) const;

 private:
  std::shared_ptr<NormLayer> ln_1_, ln_2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<MLP> mlp_;
};

}  // namespace tessera::nn
