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
// A model built without any of them is the plain single-process model.

#include <cstdint>
#include <memory>
#include <string>

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
};

class TensorParallelOps {
 public:
  virtual ~TensorParallelOps() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual bool sequence_parallel() const = 0;

  // Before a column-parallel linear: identity forward, all-reduce backward. With sequence
  // parallelism x is sharded along dim 1 (the sequence): all-gather forward, reduce-scatter
  // backward.
  virtual Tensor enter_region(const Tensor& x) = 0;
  // After a row-parallel linear (and the vocab-parallel embedding): all-reduce forward,
  // identity backward; with sequence parallelism reduce-scatter along dim 1 forward,
  // all-gather backward.
  virtual Tensor exit_region(const Tensor& x) = 0;
  // Mean cross-entropy over targets != ignore_index of logits whose last dim is this rank's
  // vocabulary slice [vocab_start, vocab_start + local_V); classes >= num_classes are padding.
  // Never gathers the full logits: max and sum all-reduces over the group.
  virtual Tensor vocab_parallel_cross_entropy(const Tensor& logits_shard, const Tensor& targets,
                                              int64_t vocab_start, int64_t num_classes,
                                              int64_t ignore_index) = 0;
  // Sequence parallelism only: this rank's slice of dim 1, and the inverse.
  virtual Tensor scatter_sequence(const Tensor& x) = 0;
  virtual Tensor gather_sequence(const Tensor& x) = 0;
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

}  // namespace tessera::nn
