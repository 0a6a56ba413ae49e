#include "tessera/plan/memory_model.h"

#include <algorithm>

#include "tessera/core/dtype.h"
#include "tessera/core/error.h"
#include "tessera/parallel/data/flat_layout.h"

namespace tessera::plan {

namespace {

int64_t round_up(int64_t n, int64_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}

// One model stage of the pipeline: its layers and whether it holds the embedding or the head.
struct StageSlice {
  int64_t first = 0, layers = 0;
  bool embedding = false, head = false;
};

StageSlice chunk_slice(const nn::GPTConfig& m, const Layout& l, int pp_rank, int chunk) {
  const int64_t stages = int64_t(l.pp) * l.virtual_stages;
  const int64_t stage = int64_t(chunk) * l.pp + pp_rank;
  const int64_t per = m.n_layer / stages;
  return {stage * per, per, stage == 0, stage == stages - 1};
}

}  // namespace

std::vector<UnitElements> rank_units(const nn::GPTConfig& m, const Layout& l, int pp_rank) {
  const int64_t h = m.n_embd;
  // The vocabulary is padded to a multiple of vocab_multiple x tp and split by rows (gpt.cpp).
  const int64_t vocab_rows = round_up(m.vocab_size, m.vocab_multiple * l.tp) / l.tp;
  const int64_t norm = m.norm == nn::NormKind::layernorm && m.bias ? 2 * h : h;
  const bool tied_buckets = m.tie_embeddings && l.pp > 1;
  std::vector<UnitElements> units;
  for (int c = 0; c < l.virtual_stages; ++c) {
    const StageSlice s = chunk_slice(m, l, pp_rank, c);
    if (s.embedding) {
      UnitElements u{"embedding"};
      const int64_t wpe = m.position == nn::PositionKind::learned ? m.block_size * h : 0;
      u.own = wpe + (tied_buckets ? 0 : vocab_rows * h);
      u.tied = tied_buckets ? vocab_rows * h : 0;
      u.compute = wpe + vocab_rows * h;
      units.push_back(u);
    }
    if (s.layers > 0) {
      const int64_t n = block_parameters(m, l.tp);
      units.push_back({str_cat("h.", s.first, "-h.", s.first + s.layers - 1), n, 0, n, s.layers});
    }
    if (s.head) {
      UnitElements u{"head"};
      const int64_t lm_head = m.tie_embeddings ? 0 : vocab_rows * h;
      u.own = norm + lm_head;
      // A tied head on a later stage than the embedding keeps a copy of wte (gpt.cpp).
      u.tied = tied_buckets ? vocab_rows * h : 0;
      u.compute = norm + lm_head + u.tied;
      units.push_back(u);
    }
  }
  return units;
}

ModelStates model_state_bytes(const nn::GPTConfig& m, const Layout& l, nn::Precision precision,
                              int pp_rank) {
  TESSERA_CHECK(pp_rank >= 0 && pp_rank < l.pp, "plan: pp rank ", pp_rank, " is outside pp ", l.pp);
  // Every bucket divides into dp shards of whole 64-byte lines (FlatLayout::kShardAlign).
  const int64_t align = int64_t(l.dp) * parallel::FlatLayout::kShardAlign;
  int64_t S = 0, compute = 0;
  for (const UnitElements& u : rank_units(m, l, pp_rank)) {
    if (u.own > 0) S += u.count * round_up(u.own, align);
    if (u.tied > 0) S += u.count * round_up(u.tied, align);
    compute += u.count * u.compute;
  }
  const int64_t shard = S / l.dp, f32 = 4;
  const bool mixed = precision != nn::Precision::fp32;
  const int64_t half = mixed ? dtype_size(nn::compute_dtype(precision)) : 0;
  // Offload at dp 1 runs as ZeRO-1 (one shard is the whole state); it shards the master.
  const int zero = l.offload ? std::max(1, l.zero) : l.zero;
  ModelStates s;
  s.padded_elements = S;
  const bool sharded_master = zero == 3 || l.offload;
  const int64_t master = f32 * (sharded_master ? shard : S);
  if (l.offload)
    s.offloaded = master + 2 * f32 * shard;  // the master shard and the moments on the host
  else
    s.parameters = master;
  // The compute copy: the chunks' own tensors, or sharded with the master at ZeRO-3.
  if (mixed) s.parameters += half * (zero == 3 ? shard : compute);
  if (zero == 0)
    s.gradients = f32 * S;
  else if (zero == 1)
    s.gradients = f32 * (S + shard);
  else
    s.gradients = f32 * shard;
  if (!l.offload) s.optimizer = 2 * f32 * (zero == 0 ? S : shard);
  return s;
}

int peak_in_flight(const Layout& l, int r) {
  const int p = l.pp, v = l.virtual_stages, m = l.microbatches;
  if (p == 1) return 1;
  if (v == 1) return std::min(m, p - r);
  return std::min(m * v, 2 * (p - r - 1) + (v - 1) * p + 1);
}

int64_t rank_activation_bytes(const Workload& w, const Layout& l, int pp_rank) {
  const nn::GPTConfig& m = w.model;
  const DType dtype = nn::compute_dtype(w.precision);
  const int64_t b = l.micro_batch(w), s = w.seq_len;
  int64_t bytes = 0;
  auto block = [&](nn::RecomputeMode mode) {
    return nn::block_activation_bytes(m, mode, b, s, dtype, l.tp, l.sequence_parallel);
  };
  for (int c = 0; c < l.virtual_stages; ++c) {
    const StageSlice slice = chunk_slice(m, l, pp_rank, c);
    // A chunk's blocks are alike but for full recomputation of only its first num_layers
    // (recomputes_block): the rest keep every activation.
    int64_t recomputed = 0;
    if (l.recompute.mode == nn::RecomputeMode::full)
      recomputed = l.recompute.num_layers < 0
                       ? slice.layers
                       : std::min<int64_t>(slice.layers, l.recompute.num_layers);
    bytes += recomputed * block(nn::RecomputeMode::full) +
             (slice.layers - recomputed) * block(l.recompute.mode == nn::RecomputeMode::full
                                                     ? nn::RecomputeMode::none
                                                     : l.recompute.mode);
  }
  return bytes;
}

MemoryEstimate estimate_memory(const Workload& w, const Layout& l, int pp_rank,
                               const MemoryOptions& options) {
  const nn::GPTConfig& m = w.model;
  MemoryEstimate e;
  e.pp_rank = pp_rank;
  const ModelStates states = model_state_bytes(m, l, w.precision, pp_rank);
  e.parameters = states.parameters;
  e.gradients = states.gradients;
  e.optimizer = states.optimizer;
  e.offloaded = states.offloaded;
  const int64_t b = l.micro_batch(w), s = w.seq_len, h = m.n_embd, tokens = b * s;
  const int64_t e_size = dtype_size(nn::compute_dtype(w.precision));
  const int64_t local = l.sequence_parallel ? tokens / l.tp : tokens;
  const int64_t vocab_rows = round_up(m.vocab_size, m.vocab_multiple * l.tp) / l.tp;
  // Peak chunks in flight, spread over the rank's v chunks: the average chunk's saves.
  e.in_flight = peak_in_flight(l, pp_rank);
  int64_t per_micro = rank_activation_bytes(w, l, pp_rank);
  // Softmax output, dropout mask and output: 5 bytes per score in 16 bits (Korthikanti et al.).
  const int64_t scores =
      options.materialized_attention ? 5 * m.n_head / l.tp * s * s * l.micro_batch(w) : 0;
  if (l.recompute.mode == nn::RecomputeMode::none) {
    int64_t layers = 0;
    for (int c = 0; c < l.virtual_stages; ++c) layers += chunk_slice(m, l, pp_rank, c).layers;
    per_micro += layers * scores;
  }
  e.activations = per_micro * e.in_flight / l.virtual_stages;
  bool holds_head = false;
  for (int c = 0; c < l.virtual_stages; ++c) holds_head |= chunk_slice(m, l, pp_rank, c).head;
  // The head saves ln_f's input and output and the cross-entropy's f32 logits (one
  // micro-batch: the last stage runs each backward right after its forward under 1F1B); its
  // backward adds the logits' gradient.
  int64_t head = 0;
  if (holds_head) {
    e.activations += e_size * (local + tokens) * h + 4 * tokens * vocab_rows;
    head = 4 * tokens * vocab_rows;
  }
  // A block's backward frees its saves as it creates gradients; at its widest it holds one
  // f-wide gradient more (measured: 0.87 MB beyond the saves of 16 blocks at 1,024 tokens,
  // width 64, f32, against 1.05 MB here). Full recomputation first rebuilds the block's saves.
  const int64_t f_local = m.ffn_dim() / l.tp;
  int64_t block = e_size * tokens * f_local;
  // Selective recomputation rebuilds the MLP activation it did not keep, one more f-wide tensor.
  if (l.recompute.mode == nn::RecomputeMode::selective) block += e_size * tokens * f_local;
  if (l.recompute.mode == nn::RecomputeMode::full)
    block += nn::block_activation_bytes(m, nn::RecomputeMode::none, b, s,
                                        nn::compute_dtype(w.precision), l.tp, l.sequence_parallel) +
             scores;
  int64_t transient = std::max(head, block);
  // A stage that sends activations holds two transfers' buffers (the gradient received, the
  // one to send) and the output whose send has not completed yet. An engine that keeps each
  // in-flight chunk's output until that chunk's backward holds those instead of the one.
  // Measured on four 1F1B stages of 0.26 MB outputs, beyond the saves and the f-wide
  // gradient: 3.3, 3.3 and 3.5 outputs' worth on the sending ranks with outputs freed once
  // sent (Tessera's executor, as Megatron-LM), 6.3, 5.5 and 4.5 when they were kept (4, 3, 2
  // in flight).
  if (l.pp > 1) {
    int sending_chunks = 0;
    for (int c = 0; c < l.virtual_stages; ++c)
      sending_chunks += !chunk_slice(m, l, pp_rank, c).head;
    const int64_t held = options.outputs_held_until_backward
                             ? int64_t(e.in_flight) * sending_chunks / l.virtual_stages
                             : 1;
    if (sending_chunks > 0) transient += (held + 2) * e_size * local * h;
  }
  // ZeRO-3 holds the units in use (the tied head reads two) and the prefetched next one, in
  // the compute dtype: three of the largest (zero_memory_test.cpp's bound).
  if (l.zero == 3) {
    int64_t largest = 0;
    for (const UnitElements& u : rank_units(m, l, pp_rank)) largest = std::max(largest, u.compute);
    transient += 3 * largest * (w.precision == nn::Precision::fp32 ? 4 : e_size);
  }
  e.buffers = transient + int64_t(options.reserve_gb * 1e9);
  return e;
}

MemoryEstimate estimate_memory(const Workload& w, const Layout& l, const MemoryOptions& options) {
  MemoryEstimate first = estimate_memory(w, l, 0, options);
  if (l.pp == 1) return first;
  MemoryEstimate last = estimate_memory(w, l, l.pp - 1, options);
  return last.total() > first.total() ? last : first;
}

}  // namespace tessera::plan
