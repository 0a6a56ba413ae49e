#pragma once
// Basic layers: Linear, Embedding, LayerNorm, RMSNorm, Dropout and ModuleList. Parameter
// names and layouts follow torch.nn (Linear weight [out, in]), so state dicts line up with
// the PyTorch models users know.
//
// Under tensor parallelism (model_parallel.h) the same layers hold shards: Linear is column-
// or row-parallel, Embedding vocab-parallel, the norms replicated (their gradients summed over
// the group when they see only a sequence shard), and Dropout keys every element by its index
// in the full, unsharded activation.

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "tessera/core/ops/quantized_linear.h"
#include "tessera/core/tensor.h"
#include "tessera/nn/init.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

// How a layer's weight is split over a tensor-parallel group; the default is not at all.
struct ParallelSplit {
  std::shared_ptr<TensorParallelOps> tp;  // null: the single-process layer
  ParamMeta meta;                         // of the weight; empty segments: one segment
};

// y = x W^T + b, W [out, in] drawn from `init`, b zeros (when `bias`). in and out are the full
// (unsharded) sizes; under a split the layer draws the full W and keeps its part:
//  - column-parallel (meta.shard rows): W's output rows and b are split, segment by segment.
//    x is the full input (the caller has entered the region); y is this rank's output slice.
//  - row-parallel (cols): W's input columns are split; x is this rank's slice of the input
//    features, the partial products are reduced over the group (exit_region) and b, which is
//    replicated, is added once after the reduction.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias, const InitSpec& init,
         const ParallelSplit& split = {});
  Tensor forward(const Tensor& x) const;
  // Row-parallel only: sequence_sharded reduce-scatters the output along dim 1 (sequence
  // parallelism) instead of all-reducing it.
  Tensor forward(const Tensor& x, bool sequence_sharded) const;
  // gelu(forward(x)) with the GELU in the GEMM's epilogue (linear_gelu), bit-identical to the
  // two ops on the CPU. A column-parallel layer applies it to its own output slice; a
  // row-parallel one runs the two ops, since its GELU must follow the reduction.
  Tensor forward_gelu(const Tensor& x) const;
  // forward(x, sequence_sharded) with the local product x W^T (+ b) formed by
  // product(weight, bias), for a product that is not a plain linear() (the recomputing linears
  // of autograd/functions/recomputed_activation.h). bias is undefined where this layer adds
  // its bias after the reduction (row-parallel).
  Tensor forward_product(
      const std::function<Tensor(const Tensor& weight, const Tensor& bias)>& product,
      bool sequence_sharded = false) const;
  const Tensor& weight() const { return weight_; }  // undefined once quantized
  const Tensor& bias() const { return bias_; }      // undefined without bias

  // Weight-only INT8 (ops/quantized_linear.h, Q8_0): the weight parameter becomes the buffers
  // weight_q8 and weight_scale, and forward runs ops::linear_q8 (the bias stays). Inference
  // only: a forward with gradients on throws. Throws for a tensor-parallel layer and for an
  // input width that is no multiple of 32.
  void quantize_q8();
  bool quantized() const { return q8_.q8.defined(); }
  const ops::Q8Weight& q8_weight() const { return q8_; }
  // W8A8 for a quantized layer: forward quantizes its input's rows to int8 too and runs
  // ops::linear_w8a8 (on or off at any time; the stored weights do not change).
  void set_int8_activations(bool on);
  bool int8_activations() const { return int8_activations_; }

 private:
  Tensor weight_, bias_;
  ops::Q8Weight q8_;
  std::shared_ptr<TensorParallelOps> tp_;
  ShardKind shard_ = ShardKind::replicated;
  bool int8_activations_ = false;
};

// A lookup table [num_embeddings, dim] drawn from `init`. Rows from num_real on (a vocabulary
// padded to a round size) start at zero; num_real = -1 means every row is real.
// Vocab-parallel (split.meta.shard rows): the layer draws the full table and keeps its rows;
// forward looks up the ids it owns, zeros for the rest, and all-reduces over the group, so
// every rank gets the full embedding of every id.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, const InitSpec& init, int64_t num_real = -1,
            const ParallelSplit& split = {});
  // ids i32/i64 [...] -> [..., dim]; an id outside [0, num_embeddings) throws.
  Tensor forward(const Tensor& ids) const;
  // This rank's rows of the full table (all of it without a split), starting at row
  // vocab_start().
  const Tensor& weight() const { return weight_; }
  int64_t vocab_start() const { return vocab_start_; }
  int64_t num_embeddings() const { return num_embeddings_; }

 private:
  Tensor weight_;
  std::shared_ptr<TensorParallelOps> tp_;
  int64_t num_embeddings_, vocab_start_ = 0;
};

// Normalization over the last dim; weight starts at ones (and LayerNorm's bias at zeros).
// Under tensor parallelism the weights are replicated. With sequence parallelism a rank
// normalizes only its sequence shard, so the weights' gradients are partial sums: forward with
// sequence_sharded routes the weights through copy_to_region, whose backward all-reduces them,
// and every rank ends the backward pass with the full gradient.
class NormLayer : public Module {
 public:
  Tensor forward(const Tensor& x, bool sequence_sharded = false) const;

 protected:
  explicit NormLayer(std::shared_ptr<TensorParallelOps> tp) : tp_(std::move(tp)) {}
  virtual Tensor normalize(const Tensor& x, const Tensor& weight, const Tensor& bias) const = 0;
  Tensor weight_, bias_;

 private:
  std::shared_ptr<TensorParallelOps> tp_;
};

class LayerNorm : public NormLayer {
 public:
  LayerNorm(int64_t dim, bool bias, double eps, DType dtype = DType::f32,
            std::shared_ptr<TensorParallelOps> tp = nullptr);

 protected:
  Tensor normalize(const Tensor& x, const Tensor& weight, const Tensor& bias) const override;

 private:
  double eps_;
};

class RMSNorm : public NormLayer {
 public:
  RMSNorm(int64_t dim, double eps, DType dtype = DType::f32,
          std::shared_ptr<TensorParallelOps> tp = nullptr);

 protected:
  Tensor normalize(const Tensor& x, const Tensor& weight, const Tensor& bias) const override;

 private:
  double eps_;
};

// Zeroes elements with probability p (scaling the rest by 1/(1-p)) in training mode; the
// identity in eval mode or when p is 0. The mask of element i is Philox stream position i of
// key mix(seed, step, layer, site), so it depends on nothing else: not the thread count, the
// call order, or the other sites.
class Dropout : public Module {
 public:
  Dropout(double p, std::shared_ptr<const DropoutState> state, int64_t layer, int64_t site);
  Tensor forward(const Tensor& x) const;
  // x [B, Ts, ...] is the slice [seq_start, seq_start + Ts) along dim 1 of an activation
  // [B, seq_total, ...] (a sequence-parallel shard): each element gets the mask of its index
  // in that full activation, so the masks equal the single-process ones.
  Tensor forward(const Tensor& x, int64_t seq_start, int64_t seq_total) const;
  // The Philox key for the current step.
  uint64_t key() const;
  double p() const { return p_; }

 private:
  double p_;
  std::shared_ptr<const DropoutState> state_;
  int64_t layer_, site_;
};

// Children named "0", "1", ... in the order appended (GPT's "h.{i}").
class ModuleList : public Module {
 public:
  void append(std::shared_ptr<Module> module);
  // A child named by an explicit index (a pipeline stage's blocks keep their global numbers).
  void append(std::shared_ptr<Module> module, int64_t index);
  int64_t size() const { return int64_t(children().size()); }
};

}  // namespace tessera::nn
