// The transformer block. In attention the only copies on the way to the fused kernel are the
// projection itself and RoPE's output:
//   qkv [B, T, (H + 2 Hkv) D] -> view [B, T, H + 2 Hkv, D] -> split into q, k, v views
//   -> (RoPE on q and k, in [B, T, heads, D]) -> transpose(1, 2) views [B, heads, T, D].
// The kernel reads any strides with unit stride in D and stores its output [B, H, T, D] as
// [B, T, H, D], so transpose(1, 2) + view to [B, T, C] is free too. In the backward pass the
// split's node gathers dq, dk and dv into one [B, T, H + 2 Hkv, D] buffer.

#include "tessera/nn/block.h"

#include <vector>

#include "tessera/autograd/functions/attention.h"
#include "tessera/autograd/functions/elementwise.h"
#include "tessera/autograd/functions/movement.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/movement.h"

namespace tessera::nn {

namespace {

std::shared_ptr<Linear> make_linear(const LayerContext& ctx, const std::string& name, int64_t in,
                                    int64_t out, double std) {
  return std::make_shared<Linear>(in, out, ctx.config->bias, ctx.child(name).init("weight", std));
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const LayerContext& ctx)
    : n_head_(ctx.config->n_head),
      n_kv_head_(ctx.config->n_kv_head),
      head_dim_(ctx.config->head_dim()),
      rope_(ctx.config->position == PositionKind::rope),
      rope_theta_(ctx.config->rope_theta) {
  const GPTConfig& cfg = *ctx.config;
  const int64_t qkv = (n_head_ + 2 * n_kv_head_) * head_dim_;
  c_attn_ = register_module("c_attn", make_linear(ctx, "c_attn", cfg.n_embd, qkv, kInitStd));
  c_proj_ = register_module(
      "c_proj", make_linear(ctx, "c_proj", cfg.n_embd, cfg.n_embd, residual_init_std(cfg)));
  resid_dropout_ = register_module(
      "resid_dropout",
      std::make_shared<Dropout>(cfg.dropout, ctx.dropout, ctx.layer, kSiteAttention));
}

Tensor CausalSelfAttention::forward(const Tensor& x, LayerKV* kv, int64_t pos) const {
  TESSERA_CHECK(x.defined() && x.dim() == 3 && x.size(2) == n_head_ * head_dim_,
                "CausalSelfAttention: x must be [B, T, ", n_head_ * head_dim_, "], got ",
                describe(x));
  TESSERA_CHECK(kv != nullptr || pos == 0, "CausalSelfAttention: position offset ", pos,
                " without a KV cache (only cached decoding starts past position 0)");
  TESSERA_CHECK(kv == nullptr || !is_grad_enabled(),
                "CausalSelfAttention: the KV cache is for inference; run under NoGradGuard");
  const int64_t B = x.size(0), T = x.size(1), D = head_dim_;
  Tensor qkv = view(c_attn_->forward(x), Shape{B, T, n_head_ + 2 * n_kv_head_, D});
  std::vector<Tensor> parts = split(qkv, std::vector<int64_t>{n_head_, n_kv_head_, n_kv_head_}, 2);
  Tensor q = parts[0], k = parts[1], v = parts[2];
  if (rope_) {
    q = rope(q, pos, rope_theta_);
    k = rope(k, pos, rope_theta_);
  }
  q = transpose(q, 1, 2);
  k = transpose(k, 1, 2);
  v = transpose(v, 1, 2);
  if (kv != nullptr) {
    TESSERA_CHECK(kv->k.defined() && kv->k.size(0) == B && pos + T <= kv->k.size(2),
                  "CausalSelfAttention: the KV cache ", describe(kv->k), " cannot hold ", T,
                  " positions from ", pos, " for batch ", B);
    ops::copy_(ops::narrow(kv->k, 2, pos, T), k);
    ops::copy_(ops::narrow(kv->v, 2, pos, T), v);
    k = ops::narrow(kv->k, 2, 0, pos + T);
    v = ops::narrow(kv->v, 2, 0, pos + T);
  }
  Tensor y = causal_attention(q, k, v);  // [B, H, T, D], stored as [B, T, H, D]
  y = view(transpose(y, 1, 2), Shape{B, T, n_head_ * D});
  return resid_dropout_->forward(c_proj_->forward(y));
}

MLP::MLP(const LayerContext& ctx) : kind_(ctx.config->mlp) {
  const GPTConfig& cfg = *ctx.config;
  const int64_t c = cfg.n_embd, h = cfg.ffn_dim();
  if (kind_ == MlpKind::gelu) {
    c_fc_ = register_module("c_fc", make_linear(ctx, "c_fc", c, h, kInitStd));
  } else {
    w_gate_ = register_module("w_gate", make_linear(ctx, "w_gate", c, h, kInitStd));
    w_up_ = register_module("w_up", make_linear(ctx, "w_up", c, h, kInitStd));
  }
  c_proj_ = register_module("c_proj", make_linear(ctx, "c_proj", h, c, residual_init_std(cfg)));
  dropout_ = register_module(
      "dropout", std::make_shared<Dropout>(cfg.dropout, ctx.dropout, ctx.layer, kSiteMlp));
}

Tensor MLP::forward(const Tensor& x) const {
  Tensor h = kind_ == MlpKind::gelu ? gelu(c_fc_->forward(x))
                                    : silu(w_gate_->forward(x)) * w_up_->forward(x);
  return dropout_->forward(c_proj_->forward(h));
}

std::shared_ptr<NormLayer> make_norm(const GPTConfig& config, DType dtype) {
  if (config.norm == NormKind::layernorm)
    return std::make_shared<LayerNorm>(config.n_embd, config.bias, config.norm_eps, dtype);
  return std::make_shared<RMSNorm>(config.n_embd, config.norm_eps, dtype);
}

Block::Block(const LayerContext& ctx) {
  ln_1_ = register_module("ln_1", make_norm(*ctx.config, ctx.dtype));
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(ctx.child("attn")));
  ln_2_ = register_module("ln_2", make_norm(*ctx.config, ctx.dtype));
  mlp_ = register_module("mlp", std::make_shared<MLP>(ctx.child("mlp")));
}

Tensor Block::forward(const Tensor& x, LayerKV* kv, int64_t pos) const {
  Tensor h = x + attn_->forward(ln_1_->forward(x), kv, pos);
  return h + mlp_->forward(ln_2_->forward(h));
}

}  // namespace tessera::nn
