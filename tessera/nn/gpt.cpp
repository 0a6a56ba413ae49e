#include "tessera/nn/gpt.h"

#include <algorithm>
#include <optional>
#include <string>

#include "tessera/autograd/functions/elementwise.h"
#include "tessera/autograd/functions/loss.h"
#include "tessera/autograd/functions/matmul.h"
#include "tessera/autograd/functions/movement.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/embedding.h"
#include "tessera/core/ops/movement.h"

namespace tessera::nn {

KVCache::KVCache(const GPTConfig& config, int64_t batch, DType dtype, int64_t capacity, int tp_size,
                 Device device)
    : batch_(batch),
      capacity_(capacity == -1 ? config.block_size : capacity),
      kv_heads_(config.n_kv_head / std::max(tp_size, 1)),
      dtype_(dtype) {
  config.validate();
  TESSERA_CHECK(tp_size >= 1 && config.n_kv_head % tp_size == 0, "KVCache: n_kv_head (",
                config.n_kv_head, ") must be divisible by the tensor-parallel size (", tp_size,
                ")");
  TESSERA_CHECK(batch > 0, "KVCache: batch must be positive, got ", batch);
  TESSERA_CHECK(capacity_ > 0 && capacity_ <= config.block_size,
                "KVCache: capacity must be -1 or in [1, block_size = ", config.block_size,
                "], got ", capacity);
  TESSERA_CHECK(is_floating(dtype), "KVCache: dtype must be floating, got ", dtype_name(dtype));
  const Shape shape{batch, kv_heads_, capacity_, config.head_dim()};
  for (int64_t i = 0; i < config.n_layer; ++i)
    layers_.push_back({zeros(shape, dtype, device), zeros(shape, dtype, device)});
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

namespace {

int64_t round_up(int64_t n, int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

}  // namespace

GPT::GPT(const GPTConfig& config, DType dtype, ModelParallel parallel, ParamInit init)
    : config_(config),
      dtype_(dtype),
      parallel_(std::move(parallel)),
      tp_(or_local(parallel_.tp)),
      dropout_(std::make_shared<DropoutState>()) {
  config_.validate();
  TESSERA_CHECK(is_floating(dtype), "GPT: dtype must be floating, got ", dtype_name(dtype));
  const StageSpec& stage = parallel_.stage;
  first_layer_ = stage.first_layer;
  const int64_t layers = stage.num_layers == -1 ? config_.n_layer - first_layer_ : stage.num_layers;
  TESSERA_CHECK(first_layer_ >= 0 && layers >= 0 && first_layer_ + layers <= config_.n_layer,
                "GPT: a pipeline stage of ", stage.num_layers, " layers from layer ", first_layer_,
                " does not fit in n_layer = ", config_.n_layer);
  TESSERA_CHECK(layers > 0 || stage.has_embedding || stage.has_head,
                "GPT: a pipeline stage with no layers, no embedding and no head is empty");
  TESSERA_CHECK(!parallel_.defer_parameters || config_.quantization != "q8_0", "GPT: a ",
                config_.quantization, " model quantizes its weights as it builds them, ",
                "so they cannot be deferred (ModelParallel::defer_parameters)");
  dropout_->seed = config_.init_seed;
  vocab_rows_ = round_up(config_.vocab_size, config_.vocab_multiple * tp_size());
  const int64_t c = config_.n_embd;
  // The vocabulary tables: vocab-parallel rows under tensor parallelism.
  ParamMeta vocab_meta;
  if (!tp_->is_local()) {
    vocab_meta.shard = ShardKind::rows;
    vocab_meta.segments = {vocab_rows_};
    if (vocab_rows_ != config_.padded_vocab_size())
      vocab_meta.unpadded_size = config_.padded_vocab_size();
  }
  // The embeddings and the final norm sit outside every block: dropout layer -1.
  const LayerContext root{&config_, -1, "", dtype, dropout_, tp_, init, parallel_.defer_parameters};
  const bool tied_copy = !stage.has_embedding && stage.has_head && config_.tie_embeddings;
  if (stage.has_embedding || tied_copy) {
    ParamMeta meta = vocab_meta;
    meta.tied_copy = tied_copy;
    wte_ = register_module("wte", std::make_shared<Embedding>(
                                      vocab_rows_, c, root.child("wte").init("weight", kInitStd),
                                      config_.vocab_size, ParallelSplit{tp_, meta}));
  }
  if (stage.has_embedding) {
    if (config_.position == PositionKind::learned)
      wpe_ = register_module(
          "wpe", std::make_shared<Embedding>(config_.block_size, c,
                                             root.child("wpe").init("weight", kInitStd)));
    drop_ = register_module(
        "drop", std::make_shared<Dropout>(config_.dropout, dropout_, -1, kSiteEmbedding));
  }
  auto h = register_module("h", std::make_shared<ModuleList>());
  for (int64_t i = first_layer_; i < first_layer_ + layers; ++i) {
    const LayerContext ctx{&config_, i,    "h." + std::to_string(i) + ".", dtype, dropout_,
                           tp_,      init, parallel_.defer_parameters};
    blocks_.push_back(std::make_shared<Block>(ctx));
    h->append(blocks_.back(), i);
  }
  // A quantized config builds quantized blocks (from the drawn weights; a checkpoint's values
  // then replace them).
  if (config_.quantization == "q8_0")
    for (const auto& block : blocks_) block->quantize_q8();
  if (!stage.has_head) return;
  ln_f_ = register_module("ln_f", make_norm(config_, dtype, tp_));
  if (!config_.tie_embeddings) {
    // This rank's rows past the real vocabulary are zero.
    InitSpec spec = root.child("lm_head").init("weight", kInitStd);
    spec.zero_rows_from = config_.vocab_size;
    lm_head_ = register_module("lm_head", std::make_shared<Linear>(c, vocab_rows_, false, spec,
                                                                   ParallelSplit{tp_, vocab_meta}));
  }
}

int64_t GPT::vocab_start() const {
  return int64_t(tp_->rank()) * (vocab_rows_ / tp_size());
}

std::string GPT::describe_parallel() const {
  const StageSpec& st = parallel_.stage;
  std::string out;
  if (!st.has_embedding || !st.has_head || num_layers() != config_.n_layer)
    out = str_cat("pipeline stage: layers ", first_layer_, "..", first_layer_ + num_layers() - 1,
                  st.has_embedding ? ", embedding" : "", st.has_head ? ", head" : "", "; ");
  if (tp_->is_local()) return out + "single process (no tensor parallelism)";
  const int t = tp_size();
  return out +
         str_cat("tensor parallel ", t, tp_->sequence_parallel() ? " (sequence parallel)" : "",
                 ": ", config_.n_head / t, " of ", config_.n_head, " heads, ",
                 config_.n_kv_head / t, " of ", config_.n_kv_head, " kv heads, ",
                 config_.ffn_dim() / t, " of ", config_.ffn_dim(), " MLP units and ",
                 vocab_rows_ / t, " of ", vocab_rows_, " vocabulary rows per rank; vocabulary ",
                 config_.vocab_size, " padded to ", vocab_rows_, " = a multiple of vocab_multiple ",
                 config_.vocab_multiple, " x tp ", t);
}

std::vector<std::pair<std::string, std::vector<std::string>>> GPT::parameter_units() const {
  std::vector<std::pair<std::string, std::vector<std::string>>> units;
  auto add = [&](const std::string& unit, auto&& belongs) {
    std::vector<std::string> names;
    for (const auto& [name, t] : named_parameters())
      if (belongs(name)) names.push_back(name);
    units.emplace_back(unit, std::move(names));
  };
  auto starts = [](const std::string& name, const std::string& prefix) {
    return name.compare(0, prefix.size(), prefix) == 0;
  };
  if (parallel_.stage.has_embedding)
    add("embedding", [&](const std::string& n) { return starts(n, "wte.") || starts(n, "wpe."); });
  for (int64_t i = first_layer_; i < first_layer_ + num_layers(); ++i) {
    const std::string unit = "h." + std::to_string(i);
    add(unit, [&](const std::string& n) { return starts(n, unit + "."); });
  }
  if (parallel_.stage.has_head)
    add("head", [&](const std::string& n) {
      return starts(n, "ln_f.") || starts(n, "lm_head.") ||
             (config_.tie_embeddings && n == "wte.weight");
    });
  return units;
}

void GPT::check_ids(const Tensor& idx, int64_t pos, bool check_length) const {
  TESSERA_CHECK(idx.defined() && idx.dim() == 2 && !is_floating(idx.dtype()),
                "GPT: token ids must be an i32/i64 [B, T] tensor, got ", describe(idx));
  const int64_t T = idx.size(1);
  TESSERA_CHECK(idx.size(0) > 0 && T > 0, "GPT: token ids ", idx.describe(),
                " must hold at least one sequence of at least one token");
  TESSERA_CHECK(!check_length || pos + T <= config_.block_size, "GPT: ", T,
                " tokens from position ", pos, " exceed block_size ", config_.block_size,
                " (token ids ", idx.describe(), ")");
  // The embedding op only rejects ids past the padded table; ids in the padding are as wrong.
  const std::vector<int64_t> ids = to_vector<int64_t>(idx);
  for (size_t i = 0; i < ids.size(); ++i)
    TESSERA_CHECK(ids[i] >= 0 && ids[i] < config_.vocab_size, "GPT: token id ", ids[i], " at [",
                  int64_t(i) / T, ", ", int64_t(i) % T, "] of ", idx.describe(),
                  " is outside [0, vocab_size = ", config_.vocab_size, ")");
}

void GPT::check_whole(const char* what) const {
  TESSERA_CHECK(
      parallel_.stage.has_embedding && parallel_.stage.has_head && num_layers() == config_.n_layer,
      "GPT::", what, " needs the whole model, but this is a pipeline stage (", describe_parallel(),
      "); use forward_stage");
}

bool GPT::sharded(const KVCache* cache) const {
  return tp_->sequence_parallel() && cache == nullptr;
}

Tensor GPT::before(const std::string& unit, const Tensor& x) const {
  return parallel_.hooks ? parallel_.hooks->before(unit, x) : x;
}

Tensor GPT::after(const std::string& unit, const Tensor& x) const {
  return parallel_.hooks ? parallel_.hooks->after(unit, x) : x;
}

Tensor GPT::embed(const Tensor& idx, int64_t pos, bool sharded) const {
  const int64_t T = idx.size(1);
  TESSERA_CHECK(!sharded || T % tp_size() == 0,
                "GPT: with sequence parallelism the sequence "
                "length (",
                T, ", token ids ", idx.describe(),
                ") must be divisible by the tensor-parallel size (", tp_size(), ")");
  Tensor x = wte_->forward(before("embedding", idx));
  if (wpe_) x = x + narrow(wpe_->weight(), 0, pos, T);
  if (sharded) x = tp_->scatter_sequence(x);
  x = apply_dropout(*drop_, x, sharded, tp_.get());
  return after("embedding", x);
}

Tensor GPT::run_blocks(Tensor x, KVCache* cache, int64_t pos) const {
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const int64_t layer = first_layer_ + int64_t(i);
    const std::string unit = "h." + std::to_string(layer);
    x = before(unit, x);
    x = blocks_[i]->forward(x, cache != nullptr ? &cache->layer(layer) : nullptr, pos);
    x = after(unit, x);
  }
  return x;
}

std::vector<std::string> GPT::quantize_q8() {
  TESSERA_CHECK(config_.quantization.empty(), "GPT: the model is already quantized (",
                config_.quantization, ")");
  for (const auto& block : blocks_) block->quantize_q8();
  config_.quantization = "q8_0";
  std::vector<std::string> names;
  for (const auto& [name, t] : named_buffers())
    if (name.size() > 10 && name.compare(name.size() - 10, 10, ".weight_q8") == 0)
      names.push_back(name.substr(0, name.size() - 3));
  return names;
}

namespace {
int64_t set_int8_activations_below(Module& m, bool on) {
  int64_t n = 0;
  if (auto* linear = dynamic_cast<Linear*>(&m); linear != nullptr && linear->quantized()) {
    linear->set_int8_activations(on);
    ++n;
  }
  for (const auto& [name, child] : m.children()) n += set_int8_activations_below(*child, on);
  return n;
}
}  // namespace

int64_t GPT::set_int8_activations(bool on) {
  TESSERA_CHECK(!on || config_.quantization == "q8_0", "GPT: int8 activations (W8A8) need ",
                "quantized weights; this model's are not (tessera ckpt quantize --to int8)");
  return set_int8_activations_below(*this, on);
}

void GPT::set_recompute(const Recompute& recompute) {
  TESSERA_CHECK(recompute.mode == RecomputeMode::full || recompute.num_layers < 0,
                "GPT: a recompute layer count (", recompute.num_layers, ") applies to full ",
                "recomputation only, not ", recompute_mode_name(recompute.mode));
  TESSERA_CHECK(recompute.num_layers >= -1, "GPT: the recompute layer count must be -1 (all) ",
                "or at least 0, got ", recompute.num_layers);
  recompute_ = recompute;
  for (size_t i = 0; i < blocks_.size(); ++i)
    blocks_[i]->set_recompute(recompute.mode != RecomputeMode::full    ? recompute.mode
                              : recompute.recomputes_block(int64_t(i)) ? RecomputeMode::full
                                                                       : RecomputeMode::none);
}

const Tensor& GPT::head_weight() const {
  return lm_head_ ? lm_head_->weight() : wte_->weight();
}

Tensor GPT::head_loss(const Tensor& x, const Tensor& targets, int64_t ignore_index,
                      bool sharded) const {
  TESSERA_CHECK(targets.defined(), "GPT: the last pipeline stage needs targets");
  Tensor h = ln_f_->forward(before("head", x), sharded);
  Tensor logits = linear(tp_->enter_region(h, sharded), head_weight());
  Tensor loss = tp_->vocab_parallel_cross_entropy(logits, targets, vocab_start(),
                                                  config_.vocab_size, ignore_index);
  return after("head", loss);
}

Tensor GPT::hidden(const Tensor& idx, KVCache* cache) const {
  check_whole("hidden");
  std::optional<NoGradGuard> inference;
  if (cache != nullptr) inference.emplace();
  const int64_t pos = cache != nullptr ? cache->length() : 0;
  check_ids(idx, pos);
  const int64_t B = idx.size(0), T = idx.size(1);
  if (cache != nullptr)
    TESSERA_CHECK(cache->batch() == B && cache->num_layers() == config_.n_layer &&
                      cache->kv_heads() == config_.n_kv_head / tp_size() &&
                      cache->dtype() == dtype_ && pos + T <= cache->capacity(),
                  "GPT: a ", dtype_name(cache->dtype()), " KV cache of batch ", cache->batch(),
                  ", ", cache->num_layers(), " layers, ", cache->kv_heads(),
                  " kv heads and capacity ", cache->capacity(), " holding ", pos,
                  " positions cannot take token ids ", idx.describe(), " for this ",
                  config_.n_layer, "-layer ", dtype_name(dtype_), " model with ",
                  config_.n_kv_head / tp_size(), " kv heads per rank");
  // Inference may run any length: where it does not divide, skip sequence parallelism (the
  // same values, more activation memory).
  const bool shard = sharded(cache) && T % tp_size() == 0;
  Tensor x = run_blocks(embed(idx, pos, shard), cache, pos);
  if (cache != nullptr) cache->advance(T);
  x = ln_f_->forward(before("head", x), shard);
  if (shard) x = tp_->gather_sequence(x);
  return after("head", x);
}

Tensor GPT::head(const Tensor& hidden) const {
  TESSERA_CHECK(parallel_.stage.has_head, "GPT::head: this pipeline stage has no head (",
                describe_parallel(), ")");
  Tensor x = before("head", hidden);
  Tensor logits = tp_->gather_last_dim(linear(tp_->copy_to_region(x), head_weight()));
  return after("head", logits);
}

Tensor GPT::forward(const Tensor& idx, KVCache* cache) const {
  std::optional<NoGradGuard> inference;
  if (cache != nullptr) inference.emplace();
  return head(hidden(idx, cache));
}

Tensor GPT::forward_paged(const Tensor& tokens, const PagedBatch& batch,
                          PagedKVCache& cache) const {
  check_whole("forward_paged");
  NoGradGuard inference;
  const int64_t N = batch.num_tokens();
  TESSERA_CHECK(
      tokens.defined() && tokens.dim() == 1 && tokens.size(0) == N && !is_floating(tokens.dtype()),
      "GPT: paged token ids must be an i32/i64 [", N, "] tensor (the batch's tokens), got ",
      describe(tokens));
  TESSERA_CHECK(
      cache.num_layers() == config_.n_layer && cache.kv_heads() == config_.n_kv_head / tp_size() &&
          cache.dtype() == dtype_ && cache.device() == wte_->weight().device(),
      "GPT: a paged ", dtype_name(cache.dtype()), " cache of ", cache.num_layers(), " layers and ",
      cache.kv_heads(), " kv heads on ", cache.device().to_string(), " cannot serve this ",
      config_.n_layer, "-layer ", dtype_name(dtype_), " model with ", config_.n_kv_head / tp_size(),
      " kv heads per rank on ", wte_->weight().device().to_string());
  check_ids(ops::unsqueeze(tokens, 0), 0, /*check_length=*/false);
  const Tensor ids = ops::unsqueeze(tokens, 0);  // [1, N]
  Tensor x = wte_->forward(before("embedding", ids));
  if (wpe_) x = x + wpe_->forward(ops::unsqueeze(batch.token_pos, 0));
  x = after("embedding", apply_dropout(*drop_, x, false, tp_.get()));
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const std::string unit = "h." + std::to_string(first_layer_ + int64_t(i));
    x = after(unit, blocks_[i]->forward_paged(before(unit, x), cache.layer(int64_t(i)), batch));
  }
  // Each segment's last row: a gather of rows, which is what the embedding op does.
  std::vector<int32_t> last;
  int64_t end = 0;
  for (const PagedBatch::Segment& s : batch.segments)
    last.push_back(int32_t((end += s.length) - 1));
  const Tensor rows =
      ops::embedding(ops::view(x, Shape{N, x.size(2)}),
                     from_vector<int32_t>(last, Shape{int64_t(last.size())}, x.device()));
  return head(after("head", ln_f_->forward(before("head", rows), false)));
}

Tensor GPT::loss(const Tensor& idx, const Tensor& targets, int64_t ignore_index) const {
  check_whole("loss");
  return forward_stage(idx, targets, ignore_index);
}

Tensor GPT::forward_stage(const Tensor& input, const Tensor& targets, int64_t ignore_index) const {
  const bool shard = sharded(nullptr);
  Tensor x;
  if (parallel_.stage.has_embedding) {
    check_ids(input, 0);
    x = embed(input, 0, shard);
  } else {
    TESSERA_CHECK(input.defined() && input.dim() == 3 && input.size(2) == config_.n_embd &&
                      input.dtype() == dtype_,
                  "GPT: a pipeline stage after the first takes ", dtype_name(dtype_),
                  " hidden states [B, T, ", config_.n_embd, "], got ", describe(input));
    TESSERA_CHECK(input.size(1) * (shard ? tp_size() : 1) <= config_.block_size,
                  "GPT: hidden states ", input.describe(), " are longer than block_size ",
                  config_.block_size);
    x = input;
  }
  x = run_blocks(x, nullptr, 0);
  if (!parallel_.stage.has_head) return x;
  return head_loss(x, targets, ignore_index, shard);
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
