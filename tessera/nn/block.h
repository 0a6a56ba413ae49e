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
//
// Tensor parallelism (LayerContext::tp, Megatron style): attention's c_attn is column-parallel
// with whole heads per rank (H / tp query heads and Hkv / tp key and value heads each) and
// c_proj row-parallel; the MLP's c_fc (w_gate, w_up) column-parallel and c_proj row-parallel.
// Each half enters its region at the input (copy_to_region, or an all-gather of the sequence
// under sequence parallelism) and leaves it in the row-parallel projection (all-reduce, or a
// reduce-scatter of the sequence). With sequence parallelism, the norms, dropout and the
// residual stream run on this rank's [B, T / tp, C] shard, except in cached decoding, where
// every rank holds the whole (short) step.

#include <cstdint>
#include <memory>

#include "tessera/core/tensor.h"
#include "tessera/nn/init.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/module.h"
#include "tessera/nn/paged_kv_cache.h"
#include "tessera/nn/recompute.h"

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
  // Under tensor parallelism x is replicated [B, T, C], or this rank's sequence shard
  // [B, T / tp, C] with sequence parallelism and no cache, and so is the result; the heads are
  // this rank's and the cache holds only them.
  Tensor forward(const Tensor& x, LayerKV* kv = nullptr, int64_t pos = 0) const;
  // Serving (inference only): x [1, N, C] holds the tokens of `batch`, each at its own
  // sequence and position; their keys and values go into the pool, then each token attends to
  // its sequence's keys up to its position through the block tables (ops::paged_attention).
  // Replicated x under tensor parallelism, as in cached decoding.
  Tensor forward_paged(const Tensor& x, PagedLayerKV& pool, const PagedBatch& batch) const;
  // Weight-only INT8 for c_attn and c_proj (Linear::quantize_q8).
  void quantize_q8();
  // This rank's query and key/value heads (all of them without tensor parallelism).
  int64_t local_heads() const { return n_head_; }
  int64_t local_kv_heads() const { return n_kv_head_; }

 private:
  std::shared_ptr<TensorParallelOps> tp_;
  int64_t n_head_, n_kv_head_, head_dim_;
  bool rope_;
  double rope_theta_;
  std::shared_ptr<Linear> c_attn_, c_proj_;
  std::shared_ptr<Dropout> resid_dropout_;
};

class MLP : public Module {
 public:
  explicit MLP(const LayerContext& ctx);
  // x [..., C] -> [..., C]. sequence_sharded (tensor parallelism only): x is this rank's
  // sequence shard [B, T / tp, C], and so is the result.
  Tensor forward(const Tensor& x, bool sequence_sharded = false) const;
  // Weight-only INT8 for every linear layer (Linear::quantize_q8).
  void quantize_q8();
  // Whether c_proj saves the activation's input and applies the activation again in backward
  // (selective recomputation, recompute.h) instead of saving its output.
  void set_recompute_activation(bool on) { recompute_activation_ = on; }

 private:
  std::shared_ptr<TensorParallelOps> tp_;
  MlpKind kind_;
  bool recompute_activation_ = false;
  std::shared_ptr<Linear> c_fc_, w_gate_, w_up_, c_proj_;
  std::shared_ptr<Dropout> dropout_;
};

// The norm layer config.norm asks for, over n_embd, with config.bias and config.norm_eps;
// tp (may be null) sums its gradients when it runs on sequence shards.
std::shared_ptr<NormLayer> make_norm(const GPTConfig& config, DType dtype,
                                     std::shared_ptr<TensorParallelOps> tp = nullptr);

// Whether a forward pass with (or without) a KV cache runs on sequence shards: sequence
// parallelism is on and the pass is not cached decoding.
bool sequence_sharded(const std::shared_ptr<TensorParallelOps>& tp, const LayerKV* kv);
// Dropout on x, or on its sequence shard (keyed by the full activation's element indices).
Tensor apply_dropout(const Dropout& dropout, const Tensor& x, bool sequence_sharded,
                     const TensorParallelOps* tp);

class Block : public Module {
 public:
  explicit Block(const LayerContext& ctx);
  // See CausalSelfAttention::forward for kv and pos.
  // Under full recomputation a training forward (grad mode on, no cache) keeps only x and
  // runs again inside backward (autograd/checkpoint.h).
  Tensor forward(const Tensor& x, LayerKV* kv = nullptr, int64_t pos = 0) const;
  // See CausalSelfAttention::forward_paged.
  Tensor forward_paged(const Tensor& x, PagedLayerKV& pool, const PagedBatch& batch) const;
  // Weight-only INT8 for the attention's and the MLP's linear layers.
  void quantize_q8();
  // What this block keeps for backward (recompute.h). full applies to this block; selective
  // to its MLP.
  void set_recompute(RecomputeMode mode);
  RecomputeMode recompute() const { return recompute_; }

 private:
  Tensor forward_body(const Tensor& x, LayerKV* kv, int64_t pos) const;

  std::shared_ptr<TensorParallelOps> tp_;
  RecomputeMode recompute_ = RecomputeMode::none;
  std::shared_ptr<NormLayer> ln_1_, ln_2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<MLP> mlp_;
};

}  // namespace tessera::nn
