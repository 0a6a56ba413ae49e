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
//
// Model parallelism (model_parallel.h; the same model, built with a ModelParallel):
//  - Tensor parallelism over tp ranks: the blocks are split as block.h says; wte (and an
//    untied lm_head) is vocab-parallel, its rows padded to a multiple of vocab_multiple * tp
//    (vocab_rows()) so they divide evenly; the head makes this rank's slice of the logits
//    and loss() is the vocab-parallel cross-entropy, which never gathers the full logits.
//    Parameter names stay the single-process names; each parameter's ParamMeta says how it is
//    split, and every rank's parameters are its slices of the single-process model's.
//  - Sequence parallelism (TensorParallelOps::sequence_parallel()): outside the tensor-
//    parallel regions activations are [B, T / tp, C]; the embedding output is scattered along
//    the sequence and the head gathers it back (with a reduce-scatter backward) for the
//    vocab-parallel head, because each rank's vocabulary slice needs every position. T must
//    divide by tp.
//  - A pipeline stage (StageSpec) builds only its blocks, keeping their global names
//    h.{first_layer + i}; see forward_stage(). With a tied embedding, a last stage that is not
//    also the first holds its own wte.weight, drawn from the same key and marked tied_copy.
//  - UnitHooks are called around each unit: "embedding" (wte, wpe), "h.{i}" and "head"
//    (ln_f with lm_head, or with wte.weight when tied); see parameter_units().

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/nn/block.h"
#include "tessera/nn/gpt_config.h"
#include "tessera/nn/layers.h"
#include "tessera/nn/model_parallel.h"
#include "tessera/nn/module.h"
#include "tessera/nn/paged_kv_cache.h"
#include "tessera/nn/recompute.h"

namespace tessera::nn {

// The KV cache for generation: every layer's keys and values for the positions seen so far,
// so each new token costs one query against the cache instead of a pass over the sequence.
class KVCache {
 public:
  // Buffers for `batch` sequences of up to `capacity` positions (-1: config.block_size), for
  // the n_kv_head / tp_size key and value heads of one tensor-parallel rank.
  KVCache(const GPTConfig& config, int64_t batch, DType dtype = DType::f32, int64_t capacity = -1,
          int tp_size = 1, Device device = Device::cpu());

  int64_t batch() const { return batch_; }
  DType dtype() const { return dtype_; }
  int64_t capacity() const { return capacity_; }
  // Positions already in the cache; the next token sits at this position.
  int64_t length() const { return length_; }
  int64_t num_layers() const { return int64_t(layers_.size()); }
  int64_t kv_heads() const { return kv_heads_; }
  LayerKV& layer(int64_t i);

  // Marks n more positions filled (the model calls this after every layer wrote them).
  void advance(int64_t n);
  // Forgets every position; the buffers stay allocated for the next prompt.
  void reset() { length_ = 0; }

 private:
  std::vector<LayerKV> layers_;
  int64_t batch_, capacity_, length_ = 0, kv_heads_;
  DType dtype_;
};

class GPT : public Module {
 public:
  // Validates the config, then draws every parameter from its (init_seed, name) key; see
  // init.h. dtype f64 serves gradcheck; training runs in f32. `parallel` builds a tensor-
  // parallel rank's shards, a pipeline stage's part, or both (the default: the whole model);
  // an invalid layout (heads, kv heads or the MLP width not divisible by tp, a stage outside
  // the layers) throws naming the sizes. ParamInit::zeros leaves the weights zero instead of
  // drawing them, for a model that a strict load_state_dict fills next.
  explicit GPT(const GPTConfig& config, DType dtype = DType::f32, ModelParallel parallel = {},
               ParamInit init = ParamInit::drawn);

  const GPTConfig& config() const { return config_; }
  DType dtype() const { return dtype_; }
  const ModelParallel& parallel() const { return parallel_; }
  int tp_size() const { return nn::tp_size(parallel_.tp); }
  // Rows of the embedding table and the head: config.padded_vocab_size(), or under tensor
  // parallelism the vocabulary padded to a multiple of vocab_multiple * tp_size().
  int64_t vocab_rows() const { return vocab_rows_; }
  // The first vocabulary row of this rank's slice (0 without tensor parallelism).
  int64_t vocab_start() const;
  // This stage's blocks: h.{first_layer()} .. h.{first_layer() + num_layers() - 1}.
  int64_t first_layer() const { return first_layer_; }
  int64_t num_layers() const { return int64_t(blocks_.size()); }
  // One line for the run's printout: the tensor-parallel split and the vocabulary padding
  // ("tensor parallel 2 (sequence parallel): 2 of 4 heads, 1 of 2 kv heads, 32 of 64 MLP
  // units and 16 of 32 vocabulary rows per rank; vocabulary 23 padded to 32 = a multiple of
  // vocab_multiple 8 x tp 2"), or "single process" / the stage's layers.
  std::string describe_parallel() const;
  // The parameter names each unit reads, in forward order ("embedding", "h.{i}", "head"),
  // for this stage; a tied head lists wte.weight under "head" too.
  std::vector<std::pair<std::string, std::vector<std::string>>> parameter_units() const;

  // idx i32/i64 [B, T] with ids in [0, vocab_size) and T <= block_size -> the final hidden
  // states [B, T, C] (after ln_f; gathered along the sequence under sequence parallelism,
  // which is skipped when T does not divide by tp).
  // With a cache (inference only: runs under NoGradGuard) the tokens sit at positions
  // cache.length() ... and the cache advances by T. Needs the whole model (no stage).
  Tensor hidden(const Tensor& idx, KVCache* cache = nullptr) const;
  // hidden [..., C] (every position, on every rank) -> logits [..., vocab_rows()]; under
  // tensor parallelism each rank computes its vocabulary slice and they are gathered, for
  // inference (loss() never gathers them).
  Tensor head(const Tensor& hidden) const;
  // logits [B, T, vocab_rows()]; columns from vocab_size on are padding.
  Tensor forward(const Tensor& idx, KVCache* cache = nullptr) const;
  // Serving: one continuous-batching iteration over the paged cache. tokens i32/i64 [N] are
  // the batch's tokens in segment order (PagedBatch); their keys and values go into the
  // pools and each attends to its own sequence. Returns the logits [segments, vocab_rows()]
  // of each segment's last token, the only ones a sampler reads. Inference only (runs under
  // NoGradGuard; put the model in eval mode for dropout). Needs the whole model.
  Tensor forward_paged(const Tensor& tokens, const PagedBatch& batch, PagedKVCache& cache) const;
  // Mean cross-entropy of next-token targets [B, T] (ignore_index skipped) over the real
  // vocabulary only. Needs the whole model (see forward_stage for a pipeline stage).
  Tensor loss(const Tensor& idx, const Tensor& targets, int64_t ignore_index = -100) const;
  // One pipeline stage's forward pass. input: token ids [B, T] on the first stage; on the
  // others the previous stage's output, hidden states [B, T, C] (under sequence parallelism
  // this rank's shard [B, T / tp, C]). Returns the mean loss on the last stage (targets [B, T]
  // required), else the hidden states after this stage's last block, shaped like its input
  // hidden states. On the whole model it is loss().
  Tensor forward_stage(const Tensor& input, const Tensor& targets = Tensor(),
                       int64_t ignore_index = -100) const;

  // Dropout keys: masks depend on (seed, step, layer, site, element) only. Set the step before
  // each training step (a resumed run sets the same step and gets the same masks).
  void set_dropout_seed(uint64_t seed) { dropout_->seed = seed; }
  void set_step(int64_t step) { dropout_->step = step; }
  int64_t step() const { return dropout_->step; }

  // What the blocks keep for backward (recompute.h); none until set. Under full with
  // num_layers >= 0 the first num_layers blocks of this stage recompute, the rest keep all.
  // Changes no parameter and no value; only memory and time.
  void set_recompute(const Recompute& recompute);
  const Recompute& recompute() const { return recompute_; }

  // Weight-only INT8 (Q8_0) for every block's linear layers, in place: config().quantization
  // becomes "q8_0" and each weight "h.{i}....weight" becomes the buffers weight_q8 and
  // weight_scale (Linear::quantize_q8). Embeddings, norms and the head stay. Returns the names
  // of the weights it quantized. Inference only from then on.
  std::vector<std::string> quantize_q8();
  // W8A8 on a quantized model: every quantized linear quantizes its input's rows to int8 too
  // (Linear::set_int8_activations). Throws when the model is not quantized. Returns the number
  // of layers switched.
  int64_t set_int8_activations(bool on);

  // The parameter count of `config` without building it (GPT-2 d48 is 6 GB in f32).
  static int64_t count_parameters(const GPTConfig& config);

 private:
  // check_length: the T tokens of idx [B, T] must fit in block_size from pos.
  void check_ids(const Tensor& idx, int64_t pos, bool check_length = true) const;
  void check_whole(const char* what) const;
  bool sharded(const KVCache* cache) const;
  Tensor before(const std::string& unit, const Tensor& x) const;
  Tensor after(const std::string& unit, const Tensor& x) const;
  // The embedding unit: ids at positions pos.. -> [B, T, C] (this rank's shard if sharded).
  Tensor embed(const Tensor& idx, int64_t pos, bool sharded) const;
  Tensor run_blocks(Tensor x, KVCache* cache, int64_t pos) const;
  // The head unit of training: ln_f, this rank's logits and the (vocab-parallel) loss.
  Tensor head_loss(const Tensor& x, const Tensor& targets, int64_t ignore_index,
                   bool sharded) const;
  const Tensor& head_weight() const;

  GPTConfig config_;
  DType dtype_;
  ModelParallel parallel_;
  std::shared_ptr<TensorParallelOps> tp_;  // parallel_.tp, or the local one: never null
  int64_t vocab_rows_, first_layer_;
  std::shared_ptr<DropoutState> dropout_;
  Recompute recompute_;
  std::shared_ptr<Embedding> wte_, wpe_;
  std::shared_ptr<Dropout> drop_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<NormLayer> ln_f_;
  std::shared_ptr<Linear> lm_head_;
};

}  // namespace tessera::nn
