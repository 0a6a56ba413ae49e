#pragma once
// Shared by the layout tests: tiny GPT configs, the single-process reference run, a run of
// ParallelTrainer under a layout, and the comparisons.
//
// Every rank runs the single-process reference itself on the same global batches: it is
// deterministic, so each rank compares against identical values.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "parallel/dp_test_util.h"
#include "parallel/rank_test.h"
#include "tessera/nn/nn.h"
#include "tessera/parallel/engine/parallel_trainer.h"
#include "tessera/tessera.h"

namespace tessera::parallel::testing {

constexpr int64_t kLayoutSteps = 10;

// Llama style: RoPE, RMSNorm, SwiGLU, untied head, no biases (so no key bias, whose gradient is
// pure rounding noise), 4 query heads over 2 kv heads: tp = 2 splits both.
inline nn::GPTConfig layout_llama() {
  nn::GPTConfig c;
  c.vocab_size = 61;  // padded to 64: a multiple of vocab_multiple 8, and of 8 * tp for tp 2
  c.vocab_multiple = 8;
  c.block_size = 16;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 16;
  c.norm = nn::NormKind::rmsnorm;
  c.mlp = nn::MlpKind::swiglu;
  c.position = nn::PositionKind::rope;
  c.tie_embeddings = false;
  c.bias = false;
  c.dropout = 0.0;
  c.init_seed = 17;
  return c;
}

// GPT-2 style: learned positions, LayerNorm and biases, GELU, and the head tied to wte (so a
// pipeline sums the tied embedding's gradient between its first and last stage).
inline nn::GPTConfig layout_gpt2() {
  nn::GPTConfig c = layout_llama();
  c.n_kv_head = c.n_head;
  c.norm = nn::NormKind::layernorm;
  c.mlp = nn::MlpKind::gelu;
  c.position = nn::PositionKind::learned;
  c.tie_embeddings = true;
  c.bias = true;
  return c;
}

// B = 8, T = 8, AdamW at a constant lr 3e-3, clipping at 0.75 (active in some steps of both
// models: their norms run 0.70..0.84 and 1.02..0.59).
//
// Why lr 3e-3: a rounding difference between layouts (~1e-7) grows along the run at a rate
// set by the run's stability, not by the layout. At lr 1e-2 the Llama-style run is unstable
// (its gradient norm triples over ten steps, 0.70 -> 2.1, and the loss rises), and the same
// 1e-7 differences grow to 4e-5 (tp2), 8e-6 (pp2, dp2) in the weights; at lr 3e-3 the run is
// stable and the worst measured is 2.8e-6 (tp2), below 1e-6 for dp2 and pp2.
inline ParallelConfig layout_config(MeshShape mesh) {
  ParallelConfig p;
  p.mesh = mesh;
  p.batch_size = 8;
  p.seq_len = 8;
  p.adamw = nn::AdamWOptions{3e-3, 0.9, 0.95, 1e-8, 0.1};
  p.lr_schedule.kind = nn::ScheduleKind::constant;
  p.lr_schedule.max_lr = 3e-3;
  p.max_grad_norm = 0.75;
  return p;
}

// One layout a test runs: the mesh, ZeRO stage, pipeline schedule (v virtual stages, m
// micro-batches), sequence parallelism, and which tiny model (GPT-2 with its tied embedding,
// or the Llama-style one).
struct LayoutCase {
  MeshShape mesh;
  int zero = 0;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int v = 1, m = 1;
  bool sp = false;
  bool gpt2 = false;
};

// layout_config(c.mesh) with the case's ZeRO stage, schedule and sequence parallelism.
inline ParallelConfig case_config(const LayoutCase& c) {
  ParallelConfig p = layout_config(c.mesh);
  p.zero_stage = c.zero;
  p.schedule = c.schedule;
  p.virtual_stages = c.v;
  p.microbatches = c.m;
  p.sequence_parallel = c.sp;
  return p;
}

inline nn::GPTConfig case_model(const LayoutCase& c) {
  return c.gpt2 ? layout_gpt2() : layout_llama();
}

// global_batch with targets set to ignore_index (-100) unevenly: all of row 1, and positions
// where (7 row + 3 position + step) % 5 == 0 in the first half of the rows; so dp ranks and
// micro-batches count different numbers of targets (the step must weight them by their share).
inline Batch masked_batch(int64_t step, int64_t B, int64_t T, int64_t vocab) {
  Batch b = global_batch(step, B, T, vocab);
  int64_t* t = b.targets.data<int64_t>();
  for (int64_t i = 0; i < B; ++i)
    for (int64_t j = 0; j < T; ++j)
      if (i == 1 || (i < B / 2 && (7 * i + 3 * j + step) % 5 == 0)) t[i * T + j] = -100;
  return b;
}

// The batch of a step: masked_batch when `masked`, else global_batch.
inline Batch step_batch(int64_t step, const ParallelConfig& p, int64_t vocab, bool masked) {
  return masked ? masked_batch(step, p.batch_size, p.seq_len, vocab)
                : global_batch(step, p.batch_size, p.seq_len, vocab);
}

struct LayoutRun {
  std::vector<double> losses, norms;
  nn::StateDict weights;  // the single-process state dict after the last step
};

// One process on the whole global batch: nn::GPT, nn::AdamW and nn::clip_and_step.
inline LayoutRun run_reference(const nn::GPTConfig& model, const ParallelConfig& p,
                               int64_t steps = kLayoutSteps, bool masked = false) {
  nn::GPT gpt(model);
  nn::AdamWOptions o = p.adamw;
  o.lr = p.lr_schedule.lr(0);
  nn::AdamW opt(gpt.named_parameters(), o);
  LayoutRun r;
  for (int64_t step = 0; step < steps; ++step) {
    opt.set_lr(p.lr_schedule.lr(step));
    gpt.set_step(step);
    Batch b = step_batch(step, p, model.vocab_size, masked);
    Tensor loss = gpt.loss(b.inputs, b.targets);
    r.losses.push_back(loss.item<float>());
    loss.backward();
    r.norms.push_back(nn::clip_and_step(opt, p.max_grad_norm));
    opt.zero_grad();
  }
  for (const auto& [name, t] : gpt.state_dict()) r.weights.emplace_back(name, ops::clone(t));
  return r;
}

// One process under nn::MixedPrecision in p.precision, as the trainer drives it.
inline LayoutRun run_single(const nn::GPTConfig& model, const ParallelConfig& p,
                            int64_t steps = kLayoutSteps) {
  nn::GPT master(model);
  std::unique_ptr<nn::GPT> compute;
  if (p.precision != nn::Precision::fp32)
    compute = std::make_unique<nn::GPT>(model, nn::compute_dtype(p.precision));
  nn::GPT& net = compute ? *compute : master;
  nn::AdamWOptions o = p.adamw;
  o.lr = p.lr_schedule.lr(0);
  nn::AdamW opt(master.named_parameters(), o);
  nn::MixedPrecision mp(p.precision, master.named_parameters(), net.named_parameters(),
                        p.loss_scaler);
  LayoutRun r;
  for (int64_t step = 0; step < steps; ++step) {
    opt.set_lr(p.lr_schedule.lr(step));
    net.set_step(step);
    Batch b = global_batch(step, p.batch_size, p.seq_len, model.vocab_size);
    Tensor loss = net.loss(b.inputs, b.targets);
    r.losses.push_back(loss.item<float>());
    mp.scale_loss(loss).backward();
    mp.accumulate_grads();
    r.norms.push_back(mp.step(opt, p.max_grad_norm).grad_norm);
    opt.zero_grad();
  }
  for (const auto& [name, t] : master.state_dict()) r.weights.emplace_back(name, ops::clone(t));
  return r;
}

// The same steps under ParallelTrainer on the MPI world.
inline LayoutRun run_layout(const nn::GPTConfig& model, const ParallelConfig& p,
                            int64_t steps = kLayoutSteps, bool masked = false) {
  ParallelTrainer trainer(test_world(), model, p);
  LayoutRun r;
  for (int64_t step = 0; step < steps; ++step) {
    Batch b = step_batch(step, p, model.vocab_size, masked);
    ParallelStepStats s = trainer.step(b.inputs, b.targets);
    r.losses.push_back(s.loss);
    r.norms.push_back(s.grad_norm);
  }
  r.weights = trainer.gather_full_state();
  return r;
}

// Losses, (optionally) gradient norms and every final weight equal bit for bit.
inline void expect_identical(const LayoutRun& got, const LayoutRun& want, const std::string& what,
                             bool norms = true) {
  EXPECT_EQ(got.losses, want.losses) << what;
  if (norms) {
    EXPECT_EQ(got.norms, want.norms) << what;
  }
  ASSERT_EQ(got.weights.size(), want.weights.size()) << what;
  for (size_t i = 0; i < got.weights.size(); ++i)
    EXPECT_TRUE(equal(got.weights[i].second, want.weights[i].second))
        << what << " " << got.weights[i].first << ": max abs difference "
        << compare_close(got.weights[i].second, want.weights[i].second, 0, 0).max_abs_error;
}

// ||a - b|| / ||b|| over a tensor.
inline double relative_error(const Tensor& a, const Tensor& b) {
  std::vector<double> x = to_vector<double>(ops::cast(ops::to(a, Device::cpu()), DType::f64));
  std::vector<double> y = to_vector<double>(ops::cast(ops::to(b, Device::cpu()), DType::f64));
  double diff = 0, ref = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    diff += (x[k] - y[k]) * (x[k] - y[k]);
    ref += y[k] * y[k];
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

}  // namespace tessera::parallel::testing
