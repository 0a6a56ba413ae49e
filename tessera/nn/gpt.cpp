#include "tessera/nn/gpt.h"

#include <optional>
#include <string>

#include "tessera/autograd/functions/elementwise.h"
#include "tessera/autograd/functions/loss.h"
#include "tessera/autograd/functions/matmul.h"
#include "tessera/autograd/functions/movement.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"

namespace tessera::nn {

KVCache::KVCache(const GPTConfig& config, int64_t batch, DType dtype, int64_t capacity)
    : batch_(batch), capacity_(capacity == -1 ? config.block_size : capacity), dtype_(dtype) {
  config.validate();
  TESSERA_CHECK(batch > 0, "KVCache: batch must be positive, got ", batch);
  TESSERA_CHECK(capacity_ > 0 && capacity_ <= config.block_size,
                "KVCache: capacity must be -1 or in [1, block_size = ", config.block_size,
                "], got ", capacity);
  TESSERA_CHECK(is_floating(dtype), "KVCache: dtype must be floating, got ", dtype_name(dtype));
  const Shape shape{batch, config.n_kv_head, capacity_, config.head_dim()};
  for (int64_t i = 0; i < config.n_layer; ++i)
    layers_.push_back({zeros(shape, dtype), zeros(shape, dtype)});
}

LayerKV& KVCache::layer(int64_t i) {
  TESSERA_CHECK(i >= 0 && i < num_layers(), "KVCache: layer ", i, " is outside [0, ", num_layers(),
                ")");
  return layers_[size_t(i)];
}

void KVCache::advance(int64_t n) {
  TESSERA_CHECK(n >= 0 && length_ + n <= capacity_, "KVCache: cannot advance by ", n,
                " positions from ", length_, " with capacity ", capacity_);
  length_ += n;
}

GPT::GPT(const GPTConfig& config, DType dtype)
    : config_(config), dtype_(dtype), dropout_(std::make_shared<DropoutState>()) {
  config_.validate();
  TESSERA_CHECK(is_floating(dtype), "GPT: dtype must be floating, got ", dtype_name(dtype));
  dropout_->seed = config_.init_seed;
  const int64_t vp = config_.padded_vocab_size(), c = config_.n_embd;
  // The embeddings and the final norm sit outside every block: dropout layer -1.
  const LayerContext root{&config_, -1, "", dtype, dropout_};
  wte_ = register_module(
      "wte", std::make_shared<Embedding>(vp, c, root.child("wte").init("weight", kInitStd),
                                         config_.vocab_size));
  if (config_.position == PositionKind::learned)
    wpe_ = register_module("wpe",
                           std::make_shared<Embedding>(config_.block_size, c,
                                                       root.child("wpe").init("weight", kInitStd)));
  drop_ = register_module("drop",
                          std::make_shared<Dropout>(config_.dropout, dropout_, -1, kSiteEmbedding));
  auto h = register_module("h", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < config_.n_layer; ++i) {
    const LayerContext ctx{&config_, i, "h." + std::to_string(i) + ".", dtype, dropout_};
    blocks_.push_back(std::make_shared<Block>(ctx));
    h->append(blocks_.back());
  }
  ln_f_ = register_module("ln_f", make_norm(config_, dtype));
  if (!config_.tie_embeddings) {
    lm_head_ = register_module(
        "lm_head",
        std::make_shared<Linear>(c, vp, false, root.child("lm_head").init("weight", kInitStd)));
    if (vp > config_.vocab_size)
      ops::zero_(ops::narrow(lm_head_->weight(), 0, config_.vocab_size, vp - config_.vocab_size));
  }
}

void GPT::check_ids(const Tensor& idx, int64_t pos) const {
  TESSERA_CHECK(idx.defined() && idx.dim() == 2 && !is_floating(idx.dtype()),
                "GPT: token ids must be an i32/i64 [B, T] tensor, got ", describe(idx));
  const int64_t T = idx.size(1);
  TESSERA_CHECK(idx.size(0) > 0 && T > 0, "GPT: token ids ", idx.describe(),
                " must hold at least one sequence of at least one token");
  TESSERA_CHECK(pos + T <= config_.block_size, "GPT: ", T, " tokens from position ", pos,
                " exceed block_size ", config_.block_size, " (token ids ", idx.describe(), ")");
  // The embedding op only rejects ids past the padded table; ids in the padding are as wrong.
  const std::vector<int64_t> ids = to_vector<int64_t>(idx);
  for (size_t i = 0; i < ids.size(); ++i)
    TESSERA_CHECK(ids[i] >= 0 && ids[i] < config_.vocab_size, "GPT: token id ", ids[i], " at [",
                  int64_t(i) / T, ", ", int64_t(i) % T, "] of ", idx.describe(),
                  " is outside [0, vocab_size = ", config_.vocab_size, ")");
}

Tensor GPT::hidden(const Tensor& idx, KVCache* cache) const {
  std::optional<NoGradGuard> inference;
  if (cache != nullptr) inference.emplace();
  const int64_t pos = cache != nullptr ? cache->length() : 0;
  check_ids(idx, pos);
  const int64_t B = idx.size(0), T = idx.size(1);
  if (cache != nullptr)
    TESSERA_CHECK(cache->batch() == B && cache->num_layers() == config_.n_layer &&
                      cache->dtype() == dtype_ && pos + T <= cache->capacity(),
                  "GPT: a ", dtype_name(cache->dtype()), " KV cache of batch ", cache->batch(),
                  ", ", cache->num_layers(), " layers and capacity ", cache->capacity(),
                  " holding ", pos, " positions cannot take token ids ", idx.describe(),
                  " for this ", config_.n_layer, "-layer ", dtype_name(dtype_), " model");
  Tensor x = wte_->forward(idx);
  if (wpe_) x = x + narrow(wpe_->weight(), 0, pos, T);
  x = drop_->forward(x);
  for (size_t i = 0; i < blocks_.size(); ++i)
    x = blocks_[i]->forward(x, cache != nullptr ? &cache->layer(int64_t(i)) : nullptr, pos);
  if (cache != nullptr) cache->advance(T);
  return ln_f_->forward(x);
}

Tensor GPT::head(const Tensor& hidden) const {
  return linear(hidden, lm_head_ ? lm_head_->weight() : wte_->weight());
}

Tensor GPT::forward(const Tensor& idx, KVCache* cache) const {
  std::optional<NoGradGuard> inference;
  if (cache != nullptr) inference.emplace();
  return head(hidden(idx, cache));
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets, int64_t ignore_index) const {
  return cross_entropy(forward(idx), targets, ignore_index, config_.vocab_size);
}

int64_t GPT::count_parameters(const GPTConfig& config) {
  config.validate();
  const int64_t c = config.n_embd, vp = config.padded_vocab_size(), h = config.ffn_dim();
  const int64_t qkv = (config.n_head + 2 * config.n_kv_head) * config.head_dim();
  const int64_t b = config.bias ? 1 : 0;
  const int64_t norm = config.norm == NormKind::layernorm ? c * (1 + b) : c;
  const int64_t attn = c * qkv + b * qkv + c * c + b * c;
  const int64_t mlp =
      config.mlp == MlpKind::gelu ? 2 * c * h + b * (h + c) : 3 * c * h + b * (2 * h + c);
  int64_t n = vp * c + config.n_layer * (2 * norm + attn + mlp) + norm;
  if (config.position == PositionKind::learned) n += config.block_size * c;
  if (!config.tie_embeddings) n += vp * c;
  return n;
}

}  // namespace tessera::nn
