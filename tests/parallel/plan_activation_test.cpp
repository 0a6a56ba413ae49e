// tessera plan's activation memory against the engine's: each rank's bytes allocated at the
// peak of a step's forward and backward passes, beyond what it held before them
// (ParallelStepStats::memory.activations: the allocator's peak less its live bytes, so this
// needs a process per rank, hence MPI only), against plan::estimate_memory's activations and
// transients for that rank, under data, tensor (with and without sequence parallelism) and
// pipeline (1F1B, interleaved) layouts and each recomputation mode.
//
// The bar: within 5% on a model where the s b h terms dominate the logits and the
// temporaries: 16 layers of width 64, micro-batches of 4 x 256 tokens, vocabulary 64. The
// tokens per micro-batch matter: each data-parallel bucket in flight holds a receive buffer
// of its size (a block's parameters, 12 h^2 x 4 bytes), which the engine allocates during
// backward and the allocator's peak counts; at 1,024 tokens a block's saves are 20 times that.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "nn/tiny_models.h"
#include "parallel/layout_test_util.h"
#include "tessera/parallel/comm/mpi_communicator.h"
#include "tessera/plan/memory_model.h"

namespace tessera::parallel {
namespace {

nn::GPTConfig activation_model() {
  nn::GPTConfig c = testing::layout_gpt2();
  c.n_layer = 16;
  c.n_embd = 64;
  c.n_head = c.n_kv_head = 4;
  c.block_size = 256;
  c.vocab_size = 64;
  return c;
}

struct ActCase {
  MeshShape mesh;
  int zero = 0, v = 1, m = 1;
  nn::RecomputeMode recompute = nn::RecomputeMode::none;
  bool sp = false;
};

void measure(const ActCase& c) {
  nn::testing::OneThread one_thread;
  const nn::GPTConfig model = activation_model();
  ParallelConfig p = testing::layout_config(c.mesh);
  p.seq_len = 256;
  p.batch_size = int64_t(c.mesh.size("dp")) * c.m * 4;  // four sequences per micro-batch
  p.zero_stage = c.zero;
  p.virtual_stages = c.v;
  p.schedule = c.v > 1 ? ScheduleKind::interleaved : ScheduleKind::one_f_one_b;
  p.microbatches = c.m;
  p.recompute.mode = c.recompute;
  p.sequence_parallel = c.sp;
  ParallelTrainer trainer(MpiCommunicator::world(), model, p);
  ParallelStepStats s;
  for (int step = 0; step < 2; ++step) {  // the second step: caches warm, as in training
    const testing::Batch b = testing::global_batch(step, p.batch_size, p.seq_len, model.vocab_size);
    s = trainer.step(b.inputs, b.targets);
  }
  plan::Workload w;
  w.model = model;
  w.seq_len = p.seq_len;
  w.global_batch = p.batch_size;
  w.precision = nn::Precision::fp32;
  plan::Layout l;
  l.dp = c.mesh.size("dp"), l.tp = c.mesh.size("tp"), l.pp = c.mesh.size("pp");
  l.virtual_stages = c.v, l.microbatches = c.m, l.zero = c.zero, l.sequence_parallel = c.sp;
  l.recompute.mode = c.recompute;
  const int rank = trainer.mesh().pp_rank();
  const plan::MemoryEstimate e = plan::estimate_memory(w, l, rank, {0});
  const double predicted = double(e.activations + e.buffers);
  const double measured = double(s.memory.activations);
  std::printf(
      "  %s, %s, pp rank %d: measured %.0f, predicted %.0f (saved %lld, transient %lld, "
      "%d in flight): %+.1f%%\n",
      trainer.config().describe().c_str(), nn::recompute_mode_name(c.recompute), rank, measured,
      predicted, (long long)e.activations, (long long)e.buffers, e.in_flight,
      100 * (predicted - measured) / measured);
  EXPECT_NEAR(predicted / measured, 1.0, 0.05)
      << trainer.config().describe() << ", pp rank " << rank;
  // The GPT's chunk outputs (a residual add, or the checkpointed blocks' output) share their
  // buffer with nothing, so every one the rank sends is freed before its backward: the
  // planner's one output per sending stage, not one per chunk in flight.
  EXPECT_EQ(s.pipeline_outputs_kept, 0) << trainer.config().describe();
  const bool sends = l.pp > 1 && (rank < l.pp - 1 || l.virtual_stages > 1);
  EXPECT_EQ(s.pipeline_outputs_freed > 0, sends)
      << trainer.config().describe() << ", pp rank " << rank;
}

TEST(PlanActivationsN4, WithinFivePercentOfTheEngine) {
  using R = nn::RecomputeMode;
  const ActCase cases[] = {
      {MeshShape(4, 1, 1), 0, 1, 1, R::none},
      {MeshShape(4, 1, 1), 0, 1, 1, R::selective},
      {MeshShape(4, 1, 1), 0, 1, 1, R::full},
      {MeshShape(4, 1, 1), 2, 1, 2, R::none},
      {MeshShape(4, 1, 1), 3, 1, 1, R::none},
      {MeshShape(2, 1, 2), 1, 1, 1, R::none},
      {MeshShape(2, 1, 2), 1, 1, 1, R::none, true},
      {MeshShape(2, 1, 2), 1, 1, 1, R::selective, true},
      {MeshShape(2, 2, 1), 0, 1, 4, R::none},
      {MeshShape(2, 2, 1), 1, 1, 4, R::full},
      {MeshShape(1, 4, 1), 0, 1, 4, R::none},
      {MeshShape(1, 2, 2), 0, 2, 4, R::none},
      {MeshShape(2, 2, 1), 0, 2, 2, R::selective},
  };
  for (const ActCase& c : cases) measure(c);
}

}  // namespace
}  // namespace tessera::parallel
