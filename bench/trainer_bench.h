#pragma once
// What the trainer benchmarks (bench_layouts, bench_overlap, bench_compression) share: one
// GPT-2 style model (8 layers, width 256, 8 heads, vocabulary 4096, 64 positions: 7.4M
// parameters, big enough that matmuls dominate a step, small enough for a 2-core machine), its
// global batch (B=16 sequences of T=64 uniform token ids from a fixed seed, the same on every
// rank) and the training settings (AdamW at a constant lr 3e-4, clipping at 1.0).

#include <cstdint>

#include "tessera/nn/nn.h"
#include "tessera/parallel/engine/parallel_trainer.h"
#include "tessera/tessera.h"

namespace tessera::bench {

constexpr int64_t kBatch = 16, kSeq = 64;

inline nn::GPTConfig bench_model() {
  nn::GPTConfig c;
  c.vocab_size = 4096;
  c.vocab_multiple = 64;
  c.block_size = kSeq;
  c.n_layer = 8;
  c.n_head = 8;
  c.n_kv_head = 8;
  c.n_embd = 256;
  c.dropout = 0.0;
  c.init_seed = 1337;
  return c;
}

// The layout and data-parallel options are the caller's; batch, sequence and optimizer these.
inline parallel::ParallelConfig bench_config(parallel::MeshShape mesh) {
  parallel::ParallelConfig p;
  p.mesh = mesh;
  p.batch_size = kBatch;
  p.seq_len = kSeq;
  p.adamw = nn::AdamWOptions{3e-4, 0.9, 0.95, 1e-8, 0.1};
  p.lr_schedule.kind = nn::ScheduleKind::constant;
  p.lr_schedule.max_lr = 3e-4;
  p.max_grad_norm = 1.0;
  return p;
}

struct Batch {
  Tensor inputs, targets;
};

inline const Batch& global_batch() {
  static const Batch b = [] {
    Generator gen(42);
    auto tokens = [&] {
      Tensor u = rand({kBatch, kSeq}, gen, DType::f64);
      return ops::cast(ops::mul(u, double(bench_model().vocab_size)), DType::i64);
    };
    return Batch{tokens(), tokens()};
  }();
  return b;
}

}  // namespace tessera::bench
