#include "tessera/nn/layers.h"

#include <string>
#include <utility>

#include "tessera/autograd/functions/dropout.h"
#include "tessera/autograd/functions/embedding.h"
#include "tessera/autograd/functions/matmul.h"
#include "tessera/autograd/functions/norm.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"

namespace tessera::nn {

namespace {

void check_size(int64_t v, const char* layer, const char* what) {
  TESSERA_CHECK(v > 0, layer, ": ", what, " must be positive, got ", v);
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, const InitSpec& init) {
  check_size(in_features, "Linear", "in_features");
  check_size(out_features, "Linear", "out_features");
  weight_ = register_parameter("weight", init_normal(Shape{out_features, in_features}, init));
  if (bias) bias_ = register_parameter("bias", zeros(Shape{out_features}, init.dtype));
}

Tensor Linear::forward(const Tensor& x) const {
  return linear(x, weight_, bias_);
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, const InitSpec& init, int64_t num_real) {
  check_size(num_embeddings, "Embedding", "num_embeddings");
  check_size(dim, "Embedding", "dim");
  TESSERA_CHECK(num_real == -1 || (num_real >= 1 && num_real <= num_embeddings),
                "Embedding: num_real must be -1 or in [1, ", num_embeddings, "], got ", num_real);
  Tensor w = init_normal(Shape{num_embeddings, dim}, init);
  if (num_real != -1 && num_real < num_embeddings)
    ops::zero_(ops::narrow(w, 0, num_real, num_embeddings - num_real));
  weight_ = register_parameter("weight", w);
}

Tensor Embedding::forward(const Tensor& ids) const {
  return embedding(weight_, ids);
}

LayerNorm::LayerNorm(int64_t dim, bool bias, double eps, DType dtype) : eps_(eps) {
  check_size(dim, "LayerNorm", "dim");
  TESSERA_CHECK(eps > 0, "LayerNorm: eps must be positive, got ", eps);
  weight_ = register_parameter("weight", ones(Shape{dim}, dtype));
  if (bias) bias_ = register_parameter("bias", zeros(Shape{dim}, dtype));
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return layernorm(x, weight_, bias_, eps_);
}

RMSNorm::RMSNorm(int64_t dim, double eps, DType dtype) : eps_(eps) {
  check_size(dim, "RMSNorm", "dim");
  TESSERA_CHECK(eps > 0, "RMSNorm: eps must be positive, got ", eps);
  weight_ = register_parameter("weight", ones(Shape{dim}, dtype));
}

Tensor RMSNorm::forward(const Tensor& x) const {
  return rmsnorm(x, weight_, eps_);
}

Dropout::Dropout(double p, std::shared_ptr<const DropoutState> state, int64_t layer, int64_t site)
    : p_(p), state_(std::move(state)), layer_(layer), site_(site) {
  TESSERA_CHECK(p >= 0.0 && p < 1.0, "Dropout: p must be in [0, 1), got ", p);
  TESSERA_CHECK(state_ != nullptr, "Dropout: the dropout state is null");
}

uint64_t Dropout::key() const {
  return mix_key({state_->seed, uint64_t(state_->step), uint64_t(layer_), uint64_t(site_)});
}

Tensor Dropout::forward(const Tensor& x) const {
  if (!is_training() || p_ == 0.0) return x;
  return dropout(x, p_, key(), 0);
}

void ModuleList::append(std::shared_ptr<Module> module) {
  register_module(std::to_string(children().size()), std::move(module));
}

}  // namespace tessera::nn
