#pragma once
// Deterministic keys for parameter init and dropout.
//
// A parameter's values are a pure function of (init_seed, its full name): the whole,
// unsharded tensor is drawn from the Philox stream whose key mixes the two, starting at
// offset 0. No draw depends on the order layers are built in, so a model with more layers,
// another parallel layout, or a shard that slices the full tensor sees the same weights.
//
// A dropout mask is a pure function of (seed, step, layer, site, element index): the key
// mixes the first four and the element index is the stream offset.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "tessera/core/dtype.h"
#include "tessera/core/tensor.h"
#include "tessera/nn/gpt_config.h"
#include "tessera/nn/model_parallel.h"
#include "tessera/nn/module.h"
#include "tessera/nn/shard_map.h"

namespace tessera::nn {

// One round of SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number
// generators", OOPSLA'14): a bijective mixer, so distinct inputs give distinct outputs.
uint64_t splitmix64(uint64_t x);
// Folds the parts in order: splitmix64(splitmix64(a) ^ b) ... (order matters).
uint64_t mix_key(std::initializer_list<uint64_t> parts);
// The Philox key of the parameter `name` (FNV-1a of the name, mixed with init_seed).
uint64_t param_key(uint64_t init_seed, std::string_view name);

// Whether a model's weights are drawn or left zero. `zeros` serves a model whose every
// parameter a strict load fills next (generate, serve, ckpt, a resume): the draws were 71% of
// `tessera generate`'s CPU time for an 87M-parameter model on a 2-core machine (perf), and its
// start fell from 3.1-3.9 s to 0.59 s without them and the optimizer file (docs/benchmarks.md).
enum class ParamInit { drawn, zeros };

// How a layer draws a weight: N(0, std) from the stream of `key` (zeros under ParamInit::zeros).
struct InitSpec {
  uint64_t key = 0;
  double std = 0.02;
  DType dtype = DType::f32;
  ParamInit init = ParamInit::drawn;
  // Rows of the full matrix from this one on are zero: the vocabulary's padding rows, which
  // are never looked up and never a class. -1: none.
  int64_t zero_rows_from = -1;
  // Build the weight without memory (core unallocated()) and register its fill instead; the
  // parallel layer then fills only what this rank keeps (ModelParallel::defer_parameters).
  bool defer = false;
};

// The full tensor N(0, spec.std) from (spec.key, offset 0), drawn on the CPU; all zeros when
// spec.init is ParamInit::zeros.
Tensor init_normal(const Shape& shape, const InitSpec& spec);

// The fill (module.h's ParamFill) of init_normal_shard(full_shape, spec, meta, rank, size):
// any range of the local tensor's elements, each drawn at its full-tensor stream position, so
// a ZeRO shard of a tensor-parallel slice draws exactly its elements and nothing else. A
// constant zero fill under ParamInit::zeros.
ParamFill normal_fill(const Shape& full_shape, const InitSpec& spec, const ParamMeta& meta,
                      int rank, int size, const std::string& what);
// Every element `value` (biases 0, norm gains 1).
ParamFill constant_fill(double value);
// A new contiguous CPU tensor of `shape` and `dtype` holding all of the fill's values.
Tensor materialize(const Shape& shape, DType dtype, const ParamFill& fill);

// What a layer registers for a drawn weight (rank `rank` of `size`'s part of the full matrix
// as `meta` splits it): its values (init_normal_shard) and no fill, or, under spec.defer, an
// unallocated tensor of the local shape and the normal_fill that makes its values.
struct WeightInit {
  Tensor value;
  ParamFill fill;
};
WeightInit init_weight(const Shape& full_shape, const InitSpec& spec, const ParamMeta& meta,
                       int rank, int size, const std::string& what);

// shard_of(init_normal(full_shape, spec), meta, rank, size, what) (shard_map.h), bit for bit,
// drawing only the elements this rank keeps (the stream position of full element (r, c) is
// r * cols + c): a rank of a tp-way split draws 1/tp of the tensor and never holds the whole,
// and every layout starts from the single-process weights. A split dim without padding (the
// layers' weights); zeros under ParamInit::zeros.
Tensor init_normal_shard(const Shape& full_shape, const InitSpec& spec, const ParamMeta& meta,
                         int rank, int size, const std::string& what);

// GPT-2's init: weights N(0, 0.02), and residual projections (the last linear of attention
// and of the MLP) N(0, 0.02 / sqrt(2 * n_layer)), as each layer adds to the residual twice.
inline constexpr double kInitStd = 0.02;
double residual_init_std(const GPTConfig& config);

// The (seed, step) every dropout site of one model reads; the model owns it and sets the step
// before each training step.
struct DropoutState {
  uint64_t seed = 0;
  int64_t step = 0;
};

// Dropout sites: the key's last part. The embedding's site sits in layer -1.
inline constexpr int64_t kSiteAttention = 0;
inline constexpr int64_t kSiteMlp = 1;
inline constexpr int64_t kSiteEmbedding = 2;

// What a transformer layer needs to build itself: the model's config, its block index and
// name prefix (so each parameter's init key comes from its full name), the parameter dtype,
// the model's dropout state, and the tensor-parallel group it is split over (null: none).
struct LayerContext {
  const GPTConfig* config = nullptr;
  int64_t layer = 0;   // block index (-1 outside the blocks); also the dropout key's layer
  std::string prefix;  // the module's full path ending in '.', such as "h.3.attn."
  DType dtype = DType::f32;
  std::shared_ptr<const DropoutState> dropout;
  std::shared_ptr<TensorParallelOps> tp;
  ParamInit init_mode = ParamInit::drawn;
  bool defer = false;  // ModelParallel::defer_parameters: weights are built without memory

  // The context of a child module called `name`.
  LayerContext child(const std::string& name) const;
  // How to draw the weight `prefix + name` with standard deviation `std`.
  InitSpec init(const std::string& name, double std) const;
};

}  // namespace tessera::nn
