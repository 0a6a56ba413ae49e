// The transformer block. In attention the only copies on the way to the fused kernel are the
// projection itself and RoPE's output:
//   qkv [B, T, (H + 2 Hkv) D] -> view [B, T, H + 2 Hkv, D] -> split into q, k, v views
//   -> (RoPE on q and k, in [B, T, heads, D]) -> transpose(1, 2) views [B, heads, T, D].
// The kernel reads any strides with unit stride in D and stores its output [B, H, T, D] as
// [B, T, H, D], so transpose(1, 2) + view to [B, T, C] is free too. In the backward pass the
// split's node gathers dq, dk and dv into one [B, T, H + 2 Hkv, D] buffer.

#include "tessera/nn/block.h"

#include <utility>
#include <vector>

#include "tessera/autograd/checkpoint.h"
#include "tessera/autograd/functions/attention.h"
#include "tessera/autograd/functions/elementwise.h"
#include "tessera/autograd/functions/movement.h"
#include "tessera/autograd/functions/recomputed_activation.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/attention.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/paged_attention.h"

namespace tessera::nn {

namespace {

std::shared_ptr<Linear> make_linear(const LayerContext& ctx, const std::string& name, int64_t in,
                                    int64_t out, double std, ParallelSplit split = {}) {
  return std::make_shared<Linear>(in, out, ctx.config->bias, ctx.child(name).init("weight", std),
                                  split);
}

// A column-parallel (rows) or row-parallel (cols) split over ctx.tp; none in one process.
ParallelSplit tp_split(const LayerContext& ctx, ShardKind shard,
                       std::vector<int64_t> segments = {}) {
  if (!ctx.tp || ctx.tp->is_local()) return {};
  return ParallelSplit{ctx.tp, ParamMeta{shard, false, std::move(segments), -1}};
}

void check_divisible(int64_t n, const char* what, const std::shared_ptr<TensorParallelOps>& tp) {
  TESSERA_CHECK(n % tp_size(tp) == 0, "tensor parallelism: ", what, " (", n,
                ") must be divisible by the tensor-parallel size (", tp_size(tp), ")");
}

}  // namespace

bool sequence_sharded(const std::shared_ptr<TensorParallelOps>& tp, const LayerKV* kv) {
  return tp && tp->sequence_parallel() && kv == nullptr;
}

Tensor apply_dropout(const Dropout& dropout, const Tensor& x, bool sequence_sharded,
                     const TensorParallelOps* tp) {
  if (!sequence_sharded) return dropout.forward(x);
  const int64_t ts = x.size(1);
  return dropout.forward(x, int64_t(tp->rank()) * ts, ts * tp->size());
}

CausalSelfAttention::CausalSelfAttention(const LayerContext& ctx)
    : tp_(or_local(ctx.tp)),
      n_head_(ctx.config->n_head),
      n_kv_head_(ctx.config->n_kv_head),
      head_dim_(ctx.config->head_dim()),
      rope_(ctx.config->position == PositionKind::rope),
      rope_theta_(ctx.config->rope_theta) {
  const GPTConfig& cfg = *ctx.config;
  check_divisible(n_head_, "n_head", tp_);
  check_divisible(n_kv_head_, "n_kv_head", tp_);
  const int64_t d = head_dim_, qkv = (n_head_ + 2 * n_kv_head_) * d;
  // Rows of c_attn: q heads, then k heads, then v heads; each rank keeps its part of each.
  c_attn_ = register_module(
      "c_attn",
      make_linear(ctx, "c_attn", cfg.n_embd, qkv, kInitStd,
                  tp_split(ctx, ShardKind::rows, {n_head_ * d, n_kv_head_ * d, n_kv_head_ * d})));
  c_proj_ = register_module(
      "c_proj", make_linear(ctx, "c_proj", cfg.n_embd, cfg.n_embd, residual_init_std(cfg),
                            tp_split(ctx, ShardKind::cols)));
  resid_dropout_ = register_module(
      "resid_dropout",
      std::make_shared<Dropout>(cfg.dropout, ctx.dropout, ctx.layer, kSiteAttention));
  n_head_ /= tp_size(tp_);
  n_kv_head_ /= tp_size(tp_);
}

Tensor CausalSelfAttention::forward(const Tensor& x, LayerKV* kv, int64_t pos) const {
  const int64_t c = n_head_ * head_dim_ * tp_size(tp_);
  TESSERA_CHECK(x.defined() && x.dim() == 3 && x.size(2) == c,
                "CausalSelfAttention: x must be [B, T, ", c, "], got ", describe(x));
  TESSERA_CHECK(kv != nullptr || pos == 0, "CausalSelfAttention: position offset ", pos,
                " without a KV cache (only cached decoding starts past position 0)");
  TESSERA_CHECK(kv == nullptr || !is_grad_enabled(),
                "CausalSelfAttention: the KV cache is for inference; run under NoGradGuard");
  const bool sharded = sequence_sharded(tp_, kv);
  const Tensor in = tp_->enter_region(x, sharded);
  const int64_t B = in.size(0), T = in.size(1), D = head_dim_;
  Tensor qkv = view(c_attn_->forward(in), Shape{B, T, n_head_ + 2 * n_kv_head_, D});
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
    TESSERA_CHECK(kv->k.defined() && kv->k.size(0) == B && kv->k.size(1) == n_kv_head_ &&
                      pos + T <= kv->k.size(2),
                  "CausalSelfAttention: the KV cache ", describe(kv->k), " cannot hold ", T,
                  " positions from ", pos, " of ", n_kv_head_, " kv heads for batch ", B);
    ops::copy_(ops::narrow(kv->k, 2, pos, T), k);
    ops::copy_(ops::narrow(kv->v, 2, pos, T), v);
    k = ops::narrow(kv->k, 2, 0, pos + T);
    v = ops::narrow(kv->v, 2, 0, pos + T);
  }
  Tensor y = causal_attention(q, k, v);  // [B, H, T, D], stored as [B, T, H, D]
  y = view(transpose(y, 1, 2), Shape{B, T, n_head_ * D});
  Tensor out = c_proj_->forward(y, sharded);
  return apply_dropout(*resid_dropout_, out, sharded, tp_.get());
}

Tensor CausalSelfAttention::forward_paged(const Tensor& x, PagedLayerKV& pool,
                                          const PagedBatch& batch) const {
  const int64_t N = batch.num_tokens(), c = n_head_ * head_dim_ * tp_size(tp_), D = head_dim_;
  TESSERA_CHECK(x.defined() && x.dim() == 3 && x.size(0) == 1 && x.size(1) == N && x.size(2) == c,
                "CausalSelfAttention: paged x must be [1, ", N, ", ", c, "], got ", describe(x));
  TESSERA_CHECK(!is_grad_enabled(),
                "CausalSelfAttention: the paged KV cache is for inference; run under NoGradGuard");
  const Tensor qkv = ops::view(c_attn_->forward(tp_->enter_region(x, false)),
                               Shape{N, n_head_ + 2 * n_kv_head_, D});
  Tensor q = ops::narrow(qkv, 1, 0, n_head_), k = ops::narrow(qkv, 1, n_head_, n_kv_head_);
  const Tensor v = ops::narrow(qkv, 1, n_head_ + n_kv_head_, n_kv_head_);
  if (rope_) {
    // Each segment's tokens sit at consecutive positions from its start: one rotation each.
    Tensor q_rot = empty_like(q), k_rot = empty_like(k);
    int64_t token = 0;
    for (const PagedBatch::Segment& s : batch.segments) {
      for (auto [from, to] : {std::pair{&q, &q_rot}, std::pair{&k, &k_rot}}) {
        const Tensor part = ops::unsqueeze(ops::narrow(*from, 0, token, s.length), 0);
        ops::copy_(ops::narrow(*to, 0, token, s.length),
                   ops::squeeze(ops::rope(part, s.start, rope_theta_), 0));
      }
      token += s.length;
    }
    q = q_rot;
    k = k_rot;
  }
  write_paged_kv(pool, batch, k, v);
  const Tensor y =
      ops::paged_attention(q, pool.k, pool.v, batch.block_tables, batch.token_row, batch.token_pos);
  const Tensor out = c_proj_->forward(ops::view(y, Shape{1, N, n_head_ * D}), false);
  return apply_dropout(*resid_dropout_, out, false, tp_.get());
}

void CausalSelfAttention::quantize_q8() {
  c_attn_->quantize_q8();
  c_proj_->quantize_q8();
}

MLP::MLP(const LayerContext& ctx) : tp_(or_local(ctx.tp)), kind_(ctx.config->mlp) {
  const GPTConfig& cfg = *ctx.config;
  const int64_t c = cfg.n_embd, h = cfg.ffn_dim();
  check_divisible(h, "the MLP width", tp_);
  const ParallelSplit column = tp_split(ctx, ShardKind::rows), row = tp_split(ctx, ShardKind::cols);
  if (kind_ == MlpKind::gelu) {
    c_fc_ = register_module("c_fc", make_linear(ctx, "c_fc", c, h, kInitStd, column));
  } else {
    w_gate_ = register_module("w_gate", make_linear(ctx, "w_gate", c, h, kInitStd, column));
    w_up_ = register_module("w_up", make_linear(ctx, "w_up", c, h, kInitStd, column));
  }
  c_proj_ =
      register_module("c_proj", make_linear(ctx, "c_proj", h, c, residual_init_std(cfg), row));
  dropout_ = register_module(
      "dropout", std::make_shared<Dropout>(cfg.dropout, ctx.dropout, ctx.layer, kSiteMlp));
}

void MLP::quantize_q8() {
  for (const auto& layer : {c_fc_, w_gate_, w_up_, c_proj_})
    if (layer) layer->quantize_q8();
}

Tensor MLP::forward(const Tensor& x, bool sequence_sharded) const {
  TESSERA_CHECK(!sequence_sharded || !tp_->is_local(),
                "MLP: sequence_sharded needs tensor parallelism");
  const Tensor in = tp_->enter_region(x, sequence_sharded);
  Tensor out;
  if (!recompute_activation_) {
    Tensor h = kind_ == MlpKind::gelu ? c_fc_->forward_gelu(in)
                                      : silu(w_gate_->forward(in)) * w_up_->forward(in);
    out = c_proj_->forward(h, sequence_sharded);
  } else if (kind_ == MlpKind::gelu) {
    // The plain GEMM, then the GELU inside c_proj: the same bits as linear_gelu on the CPU.
    const Tensor pre = c_fc_->forward(in);
    out = c_proj_->forward_product(
        [&](const Tensor& w, const Tensor& b) { return linear_recomputing_gelu(pre, w, b); },
        sequence_sharded);
  } else {
    const Tensor gate = w_gate_->forward(in), up = w_up_->forward(in);
    out = c_proj_->forward_product(
        [&](const Tensor& w, const Tensor& b) { return linear_recomputing_swiglu(gate, up, w, b); },
        sequence_sharded);
  }
  return apply_dropout(*dropout_, out, sequence_sharded, tp_.get());
}

std::shared_ptr<NormLayer> make_norm(const GPTConfig& config, DType dtype,
                                     std::shared_ptr<TensorParallelOps> tp) {
  if (config.norm == NormKind::layernorm)
    return std::make_shared<LayerNorm>(config.n_embd, config.bias, config.norm_eps, dtype,
                                       std::move(tp));
  return std::make_shared<RMSNorm>(config.n_embd, config.norm_eps, dtype, std::move(tp));
}

Block::Block(const LayerContext& ctx) : tp_(or_local(ctx.tp)) {
  ln_1_ = register_module("ln_1", make_norm(*ctx.config, ctx.dtype, tp_));
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(ctx.child("attn")));
  ln_2_ = register_module("ln_2", make_norm(*ctx.config, ctx.dtype, tp_));
  mlp_ = register_module("mlp", std::make_shared<MLP>(ctx.child("mlp")));
}

void Block::set_recompute(RecomputeMode mode) {
  recompute_ = mode;
  mlp_->set_recompute_activation(mode == RecomputeMode::selective);
}

Tensor Block::forward(const Tensor& x, LayerKV* kv, int64_t pos) const {
  if (recompute_ != RecomputeMode::full || kv != nullptr || !is_grad_enabled())
    return forward_body(x, kv, pos);
  // Dropout masks are keyed by (seed, step, layer, site, element), so the recompute draws the
  // same ones; the tensor-parallel regions inside run their collectives again, in the same
  // order on every rank.
  return autograd::checkpoint(
      [this](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{forward_body(in[0], nullptr, 0)};
      },
      {x})[0];
}

void Block::quantize_q8() {
  attn_->quantize_q8();
  mlp_->quantize_q8();
}

Tensor Block::forward_paged(const Tensor& x, PagedLayerKV& pool, const PagedBatch& batch) const {
  const Tensor h = x + attn_->forward_paged(ln_1_->forward(x, false), pool, batch);
  return h + mlp_->forward(ln_2_->forward(h, false), false);
}

Tensor Block::forward_body(const Tensor& x, LayerKV* kv, int64_t pos) const {
  const bool sharded = sequence_sharded(tp_, kv);
  Tensor h = x + attn_->forward(ln_1_->forward(x, sharded), kv, pos);
  return h + mlp_->forward(ln_2_->forward(h, sharded), sharded);
}

}  // namespace tessera::nn
