#include "tessera/nn/layers.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "tessera/autograd/functions/dropout.h"
#include "tessera/autograd/functions/elementwise.h"
#include "tessera/autograd/functions/embedding.h"
#include "tessera/autograd/functions/linear_gelu.h"
#include "tessera/autograd/functions/matmul.h"
#include "tessera/autograd/functions/movement.h"
#include "tessera/autograd/functions/norm.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"

namespace tessera::nn {

namespace {

void check_size(int64_t v, const char* layer, const char* what) {
  TESSERA_CHECK(v > 0, layer, ": ", what, " must be positive, got ", v);
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, const InitSpec& init,
               const ParallelSplit& split)
    : tp_(split.tp), shard_(split.tp ? split.meta.shard : ShardKind::replicated) {
  check_size(in_features, "Linear", "in_features");
  check_size(out_features, "Linear", "out_features");
  const Shape full{out_features, in_features};
  const int r = tp_ ? tp_->rank() : 0, t = tp_ ? tp_->size() : 1;
  ParamMeta wmeta = shard_ == ShardKind::replicated ? ParamMeta{} : split.meta;
  if (shard_ != ShardKind::replicated && wmeta.segments.empty())
    wmeta.segments = {shard_ == ShardKind::rows ? out_features : in_features};
  const WeightInit w = init_weight(full, init, wmeta, r, t, "Linear weight");
  weight_ = register_parameter("weight", w.value, wmeta, w.fill);
  if (!bias) return;
  // A column-parallel bias is split like the weight's rows; a row-parallel one is replicated.
  const ParamMeta bmeta = shard_ == ShardKind::rows ? wmeta : ParamMeta{};
  bias_ = register_parameter(
      "bias", shard_of(zeros(Shape{out_features}, init.dtype), bmeta, r, t, "Linear bias"), bmeta);
}

Tensor Linear::forward(const Tensor& x) const {
  return forward(x, false);
}

void Linear::quantize_q8() {
  TESSERA_CHECK(!quantized(), "Linear: already quantized");
  TESSERA_CHECK(shard_ == ShardKind::replicated,
                "Linear: quantized weights with tensor parallelism are not supported");
  TESSERA_CHECK(weight_.size(1) % 32 == 0, "Linear: Q8_0 needs an input width that is a ",
                "multiple of 32, got weight ", weight_.describe());
  q8_ = ops::quantize_q8(weight_);
  unregister_parameter("weight");
  weight_ = Tensor();
  register_buffer("weight_q8", q8_.q8);
  register_buffer("weight_scale", q8_.scale);
}

void Linear::set_int8_activations(bool on) {
  TESSERA_CHECK(!on || quantized(), "Linear: int8 activations need quantized weights (",
                "quantize_q8 first); this layer holds ", weight_.describe());
  int8_activations_ = on;
}

Tensor Linear::forward(const Tensor& x, bool sequence_sharded) const {
  if (quantized()) {
    TESSERA_CHECK(!is_grad_enabled(), "Linear: a quantized layer is for inference; run under ",
                  "NoGradGuard (weights ", q8_.q8.describe(), ")");
    return int8_activations_ ? ops::linear_w8a8(x, q8_, bias_) : ops::linear_q8(x, q8_, bias_);
  }
  return forward_product([&](const Tensor& w, const Tensor& b) { return linear(x, w, b); },
                         sequence_sharded);
}

Tensor Linear::forward_product(
    const std::function<Tensor(const Tensor& weight, const Tensor& bias)>& product,
    bool sequence_sharded) const {
  TESSERA_CHECK(!quantized(), "Linear: a quantized layer runs forward() only");
  TESSERA_CHECK(!sequence_sharded || shard_ == ShardKind::cols,
                "Linear: only a row-parallel layer takes sequence_sharded");
  if (shard_ != ShardKind::cols) return product(weight_, bias_);
  Tensor y = tp_->exit_region(product(weight_, Tensor()), sequence_sharded);
  if (!bias_.defined()) return y;
  // Under sequence parallelism each rank adds the bias to its shard only: sum the gradients.
  return y + (sequence_sharded ? tp_->copy_to_region(bias_) : bias_);
}

Tensor Linear::forward_gelu(const Tensor& x) const {
  if (shard_ == ShardKind::cols || quantized()) return gelu(forward(x, false));
  return linear_gelu(x, weight_, bias_);
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, const InitSpec& init, int64_t num_real,
                     const ParallelSplit& split)
    : tp_(split.tp && split.meta.shard != ShardKind::replicated ? split.tp : nullptr),
      num_embeddings_(num_embeddings) {
  check_size(num_embeddings, "Embedding", "num_embeddings");
  check_size(dim, "Embedding", "dim");
  TESSERA_CHECK(num_real == -1 || (num_real >= 1 && num_real <= num_embeddings),
                "Embedding: num_real must be -1 or in [1, ", num_embeddings, "], got ", num_real);
  TESSERA_CHECK(split.meta.shard != ShardKind::cols,
                "Embedding: only the rows (the vocabulary) can be split");
  ParamMeta meta = split.meta;
  if (tp_) {
    if (meta.segments.empty()) meta.segments = {num_embeddings};
    TESSERA_CHECK(meta.segments.size() == 1 && meta.segments[0] == num_embeddings,
                  "Embedding: a vocab-parallel table splits its ", num_embeddings,
                  " rows as one segment");
  }
  // Rows past the real vocabulary are zero, in this rank's slice as in the whole table.
  InitSpec spec = init;
  if (num_real != -1 && num_real < num_embeddings) spec.zero_rows_from = num_real;
  const int r = tp_ ? tp_->rank() : 0, t = tp_ ? tp_->size() : 1;
  const WeightInit w =
      init_weight(Shape{num_embeddings, dim}, spec, meta, r, t, "Embedding weight");
  weight_ = register_parameter("weight", w.value, meta, w.fill);
  vocab_start_ = int64_t(r) * weight_.size(0);
}

Tensor Embedding::forward(const Tensor& ids) const {
  if (!tp_) return embedding(weight_, ids);
  TESSERA_CHECK(ids.defined() && !is_floating(ids.dtype()),
                "Embedding: ids must be an i32/i64 tensor, got ", describe(ids));
  // The ids are few (B * T): split them into owned and foreign on the host. A foreign id
  // looks up local row 0 and is masked to zero, so its gradient there is zero too.
  const std::vector<int64_t> all = to_vector<int64_t>(ids);
  const int64_t rows = weight_.size(0);
  std::vector<int64_t> local(all.size());
  std::vector<float> keep(all.size());
  for (size_t i = 0; i < all.size(); ++i) {
    const int64_t id = all[i];
    TESSERA_CHECK(id >= 0 && id < num_embeddings_, "Embedding: id ", id, " at flat position ", i,
                  " of ", ids.describe(), " is outside [0, ", num_embeddings_, ")");
    const bool mine = id >= vocab_start_ && id < vocab_start_ + rows;
    local[i] = mine ? id - vocab_start_ : 0;
    keep[i] = mine ? 1.f : 0.f;
  }
  Shape mask_shape = ids.shape();
  mask_shape.push_back(1);
  Tensor mask = ops::cast(from_vector<float>(keep, mask_shape, weight_.device()), weight_.dtype());
  Tensor part = embedding(weight_, from_vector<int64_t>(local, ids.shape(), ids.device())) * mask;
  // Exactly one rank holds each id, so the sum adds zeros to it: the result is exact.
  return tp_->reduce_from_region(part);
}

Tensor NormLayer::forward(const Tensor& x, bool sequence_sharded) const {
  if (!sequence_sharded) return normalize(x, weight_, bias_);
  TESSERA_CHECK(tp_ != nullptr, "NormLayer: sequence_sharded needs a tensor-parallel group");
  return normalize(x, tp_->copy_to_region(weight_),
                   bias_.defined() ? tp_->copy_to_region(bias_) : bias_);
}

LayerNorm::LayerNorm(int64_t dim, bool bias, double eps, DType dtype,
                     std::shared_ptr<TensorParallelOps> tp)
    : NormLayer(std::move(tp)), eps_(eps) {
  check_size(dim, "LayerNorm", "dim");
  TESSERA_CHECK(eps > 0, "LayerNorm: eps must be positive, got ", eps);
  weight_ = register_parameter("weight", ones(Shape{dim}, dtype));
  if (bias) bias_ = register_parameter("bias", zeros(Shape{dim}, dtype));
}

Tensor LayerNorm::normalize(const Tensor& x, const Tensor& weight, const Tensor& bias) const {
  return layernorm(x, weight, bias, eps_);
}

RMSNorm::RMSNorm(int64_t dim, double eps, DType dtype, std::shared_ptr<TensorParallelOps> tp)
    : NormLayer(std::move(tp)), eps_(eps) {
  check_size(dim, "RMSNorm", "dim");
  TESSERA_CHECK(eps > 0, "RMSNorm: eps must be positive, got ", eps);
  weight_ = register_parameter("weight", ones(Shape{dim}, dtype));
}

Tensor RMSNorm::normalize(const Tensor& x, const Tensor& weight, const Tensor&) const {
  return rmsnorm(x, weight, eps_);
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

Tensor Dropout::forward(const Tensor& x, int64_t seq_start, int64_t seq_total) const {
  TESSERA_CHECK(x.defined() && x.dim() >= 2 && seq_start >= 0 && seq_start + x.size(1) <= seq_total,
                "Dropout: ", describe(x), " is not a slice of dim 1 of a sequence of ", seq_total,
                " from position ", seq_start);
  if (!is_training() || p_ == 0.0) return x;
  if (x.size(1) == seq_total) return dropout(x, p_, key(), 0);
  // Row b of the shard is one contiguous run of the full activation's flat index, starting
  // at (b * seq_total + seq_start) * inner.
  const int64_t inner = x.numel() / (x.size(0) * x.size(1));
  std::vector<Tensor> rows;
  for (int64_t b = 0; b < x.size(0); ++b)
    rows.push_back(
        dropout(narrow(x, 0, b, 1), p_, key(), uint64_t((b * seq_total + seq_start) * inner)));
  return cat(rows, 0);
}

void ModuleList::append(std::shared_ptr<Module> module) {
  register_module(std::to_string(children().size()), std::move(module));
}

void ModuleList::append(std::shared_ptr<Module> module, int64_t index) {
  TESSERA_CHECK(index >= 0, "ModuleList: index must be >= 0, got ", index);
  register_module(std::to_string(index), std::move(module));
}

}  // namespace tessera::nn
