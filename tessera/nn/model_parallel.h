#pragma once
// How nn models take part in model parallelism without depending on the parallel layer.
//
// nn defines the interfaces; tessera/parallel implements them over communicators:
//  - TensorParallelOps: the communication regions of Megatron-style tensor parallelism,
//    called by the model at fixed points (entering and leaving column/row-parallel regions,
//    the vocab-parallel embedding and loss, sequence-parallel scatter and gather).
//  - ParamMeta: how each parameter is split across the tensor-parallel group and whether it is
//    a tied copy, so the gradient norm counts every element exactly once and ZeRO knows what
//    it shards.
//  - StageSpec: the slice of the model a pipeline stage builds.
//  - UnitHooks: called around each unit of parameters (embedding, each block, the head) in the
//    forward pass; ZeRO-3 gathers a unit's parameters there and frees them after.
//  - ModelParallel: the three together, handed to a model at construction.
// A model built without any of them is the plain single-process model: its layers call the
// same regions on local_tensor_parallel(), where every region is the identity.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::nn {

// How a parameter is split over the tensor-parallel ranks.
enum class ShardKind : uint8_t {
  replicated,  // every rank holds all of it (norms, row-parallel biases)
  rows,        // dim 0 split in tp equal parts (column-parallel weights [out, in] and biases,
               // the vocab-parallel embedding [V, C])
  cols,        // dim 1 split (row-parallel weights [out, in])
};

struct ParamMeta {
  ShardKind shard = ShardKind::replicated;
  // A second copy of a parameter that lives on another pipeline stage (the last stage's copy of
  // a tied embedding): its gradient is summed with the original's and it is not counted again
  // in the global norm.
  bool tied_copy = false;
  // rows/cols: the split dim of the full tensor is these segments one after another, and each
  // segment is split evenly, rank r holding part r of every segment in order. One segment for
  // most weights; c_attn has three ({H D, Hkv D, Hkv D}), so every rank owns whole q, k and v
  // heads. The sum is the full (tensor-parallel) length of the split dim.
  std::vector<int64_t> segments;
  // rows/cols: when tensor parallelism pads the split dim beyond the single-process model's
  // (the vocabulary, padded to a multiple of vocab_multiple * tp), its single-process length;
  // the extra rows are zero and stay zero (never looked up, never a class). -1: no padding.
  int64_t unpadded_size = -1;
};

// The communication of Megatron-style tensor parallelism. Every method is an autograd function
// and a collective over the tensor-parallel group: every rank calls it in the same order.
// "Sequence" methods split and join dim 1 (the sequence, [B, T, C]) in rank order.
class TensorParallelOps {
 public:
  virtual ~TensorParallelOps() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether activations outside the tensor-parallel regions are sharded along the sequence
  // (LayerNorm, dropout and the residual stream then run on [B, T / size, C]).
  virtual bool sequence_parallel() const = 0;
  // True for local_tensor_parallel(): no group, so the parameters are whole (ParamMeta says
  // replicated) rather than split into one part.
  virtual bool is_local() const { return false; }

  // Identity forward, all-reduce backward (the input of a column-parallel region).
  virtual Tensor copy_to_region(const Tensor& x) = 0;
  // All-reduce forward, identity backward (the output of a row-parallel region).
  virtual Tensor reduce_from_region(const Tensor& x) = 0;
  // All-gather along dim 1 forward, reduce-scatter backward (sequence-parallel region entry).
  virtual Tensor sequence_gather(const Tensor& x) = 0;
  // Reduce-scatter along dim 1 forward, all-gather backward (sequence-parallel region exit).
  virtual Tensor sequence_reduce_scatter(const Tensor& x) = 0;
  // This rank's slice of dim 1 forward, all-gather backward: replicated -> sequence-sharded.
  virtual Tensor scatter_sequence(const Tensor& x) = 0;
  // All-gather along dim 1 forward, this rank's slice backward: sequence-sharded -> replicated
  // (the inverse of scatter_sequence).
  virtual Tensor gather_sequence(const Tensor& x) = 0;
  // All-gather along the last dim forward, this rank's slice backward: vocab-parallel logits
  // -> full logits, for inference (the loss never needs them).
  virtual Tensor gather_last_dim(const Tensor& x) = 0;
  // Mean cross-entropy over targets != ignore_index of logits whose last dim is this rank's
  // vocabulary slice [vocab_start, vocab_start + local_V); classes >= num_classes are padding.
  // Never gathers the full logits: max and sum all-reduces over the group.
  virtual Tensor vocab_parallel_cross_entropy(const Tensor& logits_shard, const Tensor& targets,
                                              int64_t vocab_start, int64_t num_classes,
                                              int64_t ignore_index) = 0;

  // Before a column-parallel linear: x replicated -> copy_to_region; x sequence-sharded ->
  // sequence_gather.
  Tensor enter_region(const Tensor& x, bool sequence_sharded) {
    return sequence_sharded ? sequence_gather(x) : copy_to_region(x);
  }
  // After a row-parallel linear: reduce_from_region, or sequence_reduce_scatter when the
  // activations outside the region are sequence-sharded.
  Tensor exit_region(const Tensor& x, bool sequence_sharded) {
    return sequence_sharded ? sequence_reduce_scatter(x) : reduce_from_region(x);
  }
};

// The part of a GPT that one pipeline stage builds.
struct StageSpec {
  int64_t first_layer = 0;
  int64_t num_layers = -1;     // -1: through the last layer
  bool has_embedding = true;   // wte (and wpe): the first stage
  bool has_head = true;        // ln_f, the head and the loss: the last stage
};

// Called around each unit of parameters in the forward pass: "embedding", "h.0", ..., "head".
// before() returns x unchanged or wrapped (an autograd function whose backward gathers again).
class UnitHooks {
 public:
  virtual ~UnitHooks() = default;
  virtual Tensor before(const std::string& unit, const Tensor& x) = 0;
  virtual Tensor after(const std::string& unit, const Tensor& x) = 0;
};

// What a model is built with for model parallelism; the default is the single-process model.
struct ModelParallel {
  std::shared_ptr<TensorParallelOps> tp;  // null: no tensor parallelism
  StageSpec stage;                        // default: every layer, embedding and head
  std::shared_ptr<UnitHooks> hooks;       // null: none
  // Build the drawn weights (every Linear and Embedding) without memory, each with the fill
  // that makes its values (Module::param_fill), for a parallel layer that allocates the
  // parameters itself and fills only what a rank keeps: ZeRO-3 then never holds a whole stage,
  // even while building it. Norm gains and biases, a few per block, are built as usual.
  bool defer_parameters = false;
};

// One rank, no communication: the copy, reduce, gather and scatter regions return their input
// (the same tensor, no autograd node) and the vocab-parallel loss is the plain cross-entropy
// over the whole vocabulary. Shared; it holds no state.
std::shared_ptr<TensorParallelOps> local_tensor_parallel();

// tp, or local_tensor_parallel() when tp is null: what a layer calls its regions on.
inline std::shared_ptr<TensorParallelOps> or_local(std::shared_ptr<TensorParallelOps> tp) {
  return tp ? std::move(tp) : local_tensor_parallel();
}

// The tensor-parallel size of `tp` (1 when null).
inline int tp_size(const std::shared_ptr<TensorParallelOps>& tp) {
  return tp ? tp->size() : 1;
}

}  // namespace tessera::nn
