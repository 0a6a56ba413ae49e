// The layouts whose results are bit-identical, because the order of every reduction is
// unchanged, asserted bit for bit (losses, gradient norms and final weights).
//
// Exact:
//  - ZeRO 0, 1, 2 and 3 on the same layout with one micro-batch: every stage reduces the same
//    unit buckets with the same reduce-scatter, updates elementwise on the same shards and sums
//    the norm over the same pieces (data_parallel.h). With M > 1, ZeRO 0/1 accumulate the
//    micro-batches locally and reduce once, while ZeRO 2/3 reduce every micro-batch and add the
//    averages: (a1 + a2 + b1 + b2) / 2 against (a1 + b1) / 2 + (a2 + b2) / 2, so only 0 = 1 and
//    2 = 3 remain exact there.
//  - A pipeline against one process, with one micro-batch and clipping off, on the untied
//    (Llama-style) model: each stage runs the same kernels on the same shapes as the whole
//    model, a received activation is a bit copy, and a group of one reduces nothing. Clipping
//    must be off because the global norm sums per-stage partial sums (another grouping), which
//    moves the clip factor by an ulp; a tied embedding is out because its two gradients are
//    added by an all-reduce where one process accumulates them inside autograd.
//  - GPipe against 1F1B (and, with two chunks per rank, against interleaved 1F1B) on the same
//    pipeline and micro-batches: both run each chunk's micro-batch backwards in ascending
//    order, so every parameter accumulates the same terms in the same order.
//
// Not exact (layout_equivalence_test.cpp bounds them): dp against one process (the batch sum is
// split across ranks), tp (row-parallel partial sums), several micro-batches against one batch,
// and sequence parallelism against none (LayerNorm weight gradients summed per sequence shard).

#include <gtest/gtest.h>

#include "nn/tiny_models.h"
#include "parallel/layout_test_util.h"
#include "parallel/rank_test.h"

namespace tessera::parallel {
namespace {

using testing::layout_config;
using testing::layout_gpt2;
using testing::layout_llama;
using testing::LayoutRun;

constexpr int64_t kSteps = 4;

using testing::expect_identical;

ParallelConfig with(MeshShape mesh, int zero, ScheduleKind kind, int v, int m) {
  ParallelConfig p = layout_config(mesh);
  p.zero_stage = zero;
  p.schedule = kind;
  p.virtual_stages = v;
  p.microbatches = m;
  return p;
}

void zero_stages_agree(MeshShape mesh, ScheduleKind kind, int m, const nn::GPTConfig& model) {
  std::vector<LayoutRun> runs;
  for (int z = 0; z <= 3; ++z)
    runs.push_back(testing::run_layout(model, with(mesh, z, kind, 1, m), kSteps));
  const std::string what = mesh.to_string() + " m" + std::to_string(m);
  expect_identical(runs[1], runs[0], what + ": ZeRO-1 vs ZeRO-0");
  expect_identical(runs[3], runs[2], what + ": ZeRO-3 vs ZeRO-2");
  if (m == 1) expect_identical(runs[2], runs[0], what + ": ZeRO-2 vs ZeRO-0");
}

RANK_TEST(LayoutExactN2, ZeroStagesAreBitIdenticalOnOneLayout) {
  nn::testing::OneThread one_thread;
  zero_stages_agree({2, 1, 1}, ScheduleKind::one_f_one_b, 1, layout_gpt2());
  zero_stages_agree({2, 1, 1}, ScheduleKind::one_f_one_b, 2, layout_llama());
}

RANK_TEST(LayoutExactN4, ZeroStagesAreBitIdenticalUnderTensorAndPipelineParallelism) {
  nn::testing::OneThread one_thread;
  zero_stages_agree({2, 2, 1}, ScheduleKind::one_f_one_b, 2, layout_gpt2());
  zero_stages_agree({2, 1, 2}, ScheduleKind::one_f_one_b, 1, layout_llama());
}

RANK_TEST(LayoutExactN2, PipelineWithOneMicroBatchIsOneProcess) {
  nn::testing::OneThread one_thread;
  const nn::GPTConfig model = layout_llama();
  ParallelConfig p = layout_config({});
  p.max_grad_norm = 0;  // see the file comment
  const LayoutRun ref = testing::run_reference(model, p, kSteps);
  for (auto [kind, v] : {std::pair{ScheduleKind::gpipe, 1},
                         {ScheduleKind::one_f_one_b, 1},
                         {ScheduleKind::gpipe, 2}}) {
    ParallelConfig q = with({1, 2, 1}, 0, kind, v, 1);
    q.max_grad_norm = 0;
    // The norm is reported, not used: it is summed per stage, so only the weights and losses
    // are exact.
    expect_identical(testing::run_layout(model, q, kSteps), ref, q.describe(), /*norms=*/false);
  }
}

RANK_TEST(LayoutExactN2, GPipeAndOneFOneBAgree) {
  nn::testing::OneThread one_thread;
  for (const nn::GPTConfig& model : {layout_llama(), layout_gpt2()}) {
    const LayoutRun gpipe =
        testing::run_layout(model, with({1, 2, 1}, 0, ScheduleKind::gpipe, 1, 4), kSteps);
    const LayoutRun one_f_one_b =
        testing::run_layout(model, with({1, 2, 1}, 0, ScheduleKind::one_f_one_b, 1, 4), kSteps);
    expect_identical(one_f_one_b, gpipe, "pp2 m4: 1f1b vs gpipe");
    // Two chunks per rank: GPipe runs a chunk's micro-batch backwards in ascending order, as
    // interleaved 1F1B does.
    const LayoutRun gpipe2 =
        testing::run_layout(model, with({1, 2, 1}, 0, ScheduleKind::gpipe, 2, 2), kSteps);
    const LayoutRun interleaved =
        testing::run_layout(model, with({1, 2, 1}, 0, ScheduleKind::interleaved, 2, 2), kSteps);
    expect_identical(interleaved, gpipe2, "pp2 v2 m2: interleaved vs gpipe");
  }
}

}  // namespace
}  // namespace tessera::parallel
