#pragma once
// Basic layers: Linear, Embedding, LayerNorm, RMSNorm, Dropout and ModuleList. Parameter
// names and layouts follow torch.nn (Linear weight [out, in]), so state dicts line up with
// the PyTorch models users know.

#include <cstdint>
#include <memory>

#include "tessera/core/tensor.h"
#include "tessera/nn/init.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

// y = x W^T + b, W [out, in] drawn from `init`, b zeros (when `bias`).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias, const InitSpec& init);
  Tensor forward(const Tensor& x) const;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without bias

 private:
  Tensor weight_, bias_;
};

// A lookup table [num_embeddings, dim] drawn from `init`. Rows from num_real on (a vocabulary
// padded to a round size) start at zero; num_real = -1 means every row is real.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, const InitSpec& init, int64_t num_real = -1);
  // ids i32/i64 [...] -> [..., dim]; an id outside [0, num_embeddings) throws.
  Tensor forward(const Tensor& ids) const;
  const Tensor& weight() const { return weight_; }

 private:
  Tensor weight_;
};

// Normalization over the last dim; weight starts at ones (and LayerNorm's bias at zeros).
class NormLayer : public Module {
 public:
  virtual Tensor forward(const Tensor& x) const = 0;
};

class LayerNorm : public NormLayer {
 public:
  LayerNorm(int64_t dim, bool bias, double eps, DType dtype = DType::f32);
  Tensor forward(const Tensor& x) const override;

 private:
  Tensor weight_, bias_;
  double eps_;
};

class RMSNorm : public NormLayer {
 public:
  RMSNorm(int64_t dim, double eps, DType dtype = DType::f32);
  Tensor forward(const Tensor& x) const override;

 private:
  Tensor weight_;
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
  int64_t size() const { return int64_t(children().size()); }
};

}  // namespace tessera::nn
