#pragma once
// GPT: token (and, for learned positions, position) embeddings, n_layer pre-norm blocks, a
// final norm and the language-model head, for GPT-2 and Llama-style configs (gpt_config.h).
//
// Parameter names (importers and checkpoints rely on them): wte.weight, wpe.weight,
// h.{i}.ln_1.{weight,bias}, h.{i}.attn.c_attn.{weight,bias}, h.{i}.attn.c_proj.{weight,bias},
// h.{i}.ln_2.{weight,bias}, h.{i}.mlp.c_fc.{weight,bias} and h.{i}.mlp.c_proj.{weight,bias}
// (SwiGLU: h.{i}.mlp.w_gate.weight, h.{i}.mlp.w_up.weight, h.{i}.mlp.c_proj.weight),
// ln_f.{weight,bias}, and lm_head.weight when the head is not tied to wte. Biases exist only
// with config.bias; wpe only with learned positions. Weights are [out, in].
//
// The embedding table and the head have padded_vocab_size() rows; the padded rows start at
// zero and are never a target (the loss counts only the first vocab_size classes).

#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/nn/block.h"
#include "tessera/nn/gpt_config.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

// The KV cache for generation: every layer's keys and values for the positions seen so far,
// so each new token costs one query against the cache instead of a pass over the sequence.
class KVCache {
 public:
  // Buffers for `batch` sequences of up to `capacity` positions (-1: config.block_size).
  KVCache(const GPTConfig& config, int64_t batch, DType dtype = DType::f32, int64_t capacity = -1);

  int64_t batch() const { return batch_; }
  DType dtype() const { return dtype_; }
  int64_t capacity() const { return capacity_; }
  // Positions already in the cache; the next token sits at this position.
  int64_t length() const { return length_; }
  int64_t num_layers() const { return int64_t(layers_.size()); }
  LayerKV& layer(int64_t i);

  // Marks n more positions filled (the model calls this after every layer wrote them).
  void advance(int64_t n);
  // Forgets every position; the buffers stay allocated for the next prompt.
  void reset() { length_ = 0; }

 private:
  std::vector<LayerKV> layers_;
  int64_t batch_, capacity_, length_ = 0;
  DType dtype_;
};

class GPT : public Module {
 public:
  // Validates the config, then draws every parameter from its (init_seed, name) key; see
  // init.h. dtype f64 serves gradcheck; training runs in f32.
  explicit GPT(const GPTConfig& config, DType dtype = DType::f32);

  const GPTConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }

  // idx i32/i64 [B, T] with ids in [0, vocab_size) and T <= block_size -> the final hidden
  // states [B, T, C] (after ln_f). With a cache (inference only: runs under NoGradGuard) the
  // tokens sit at positions cache.length() ... and the cache advances by T.
  Tensor hidden(const Tensor& idx, KVCache* cache = nullptr) const;
  // hidden [..., C] -> logits [..., padded_vocab_size].
  Tensor head(const Tensor& hidden) const;
  // logits [B, T, padded_vocab_size]; columns from vocab_size on are padding.
  Tensor forward(const Tensor& idx, KVCache* cache = nullptr) const;
  // Mean cross-entropy of next-token targets [B, T] (ignore_index skipped) over the real
  // vocabulary only.
  Tensor loss(const Tensor& idx, const Tensor& targets, int64_t ignore_index = -100) const;

  // Dropout keys: masks depend on (seed, step, layer, site, element) only. Set the step before
  // each training step (a resumed run sets the same step and gets the same masks).
  void set_dropout_seed(uint64_t seed) { dropout_->seed = seed; }
  void set_step(int64_t step) { dropout_->step = step; }
  int64_t step() const { return dropout_->step; }

  // The parameter count of `config` without building it (GPT-2 d48 is 6 GB in f32).
  static int64_t count_parameters(const GPTConfig& config);

 private:
  void check_ids(const Tensor& idx, int64_t pos) const;

  GPTConfig config_;
  DType dtype_;
  std::shared_ptr<DropoutState> dropout_;
  std::shared_ptr<Embedding> wte_, wpe_;
  std::shared_ptr<Dropout> drop_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<NormLayer> ln_f_;
  std::shared_ptr<Linear> lm_head_;
};

}  // namespace tessera::nn
