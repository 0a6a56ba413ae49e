// Activation recomputation under every kind of layout: --recompute selective and full (all
// layers, and one layer per stage) give the bits of --recompute none, over three steps (losses,
// gradient norms and final weights), with dropout on so each recompute must replay the keyed
// masks. What this covers beyond tests/nn/recompute_test.cpp: a recomputed block under ZeRO-3
// (its parameters held through its backward), under tensor and sequence parallelism (the
// regions' collectives run again inside backward, in the same order on every rank), in
// pipeline stages and interleaved chunks, and in bf16.

#include <gtest/gtest.h>

#include "nn/tiny_models.h"
#include "parallel/layout_test_util.h"
#include "parallel/rank_test.h"

namespace tessera::parallel {
namespace {

using testing::LayoutCase;
using testing::LayoutRun;

constexpr int64_t kSteps = 3;

using testing::expect_identical;

void recompute_is_exact(const LayoutCase& c, nn::Precision precision = nn::Precision::fp32) {
  nn::GPTConfig model = testing::case_model(c);
  model.dropout = 0.1;
  ParallelConfig p = testing::case_config(c);
  p.precision = precision;
  const LayoutRun none = testing::run_layout(model, p, kSteps);
  for (const nn::Recompute r :
       {nn::Recompute{nn::RecomputeMode::selective}, nn::Recompute{nn::RecomputeMode::full},
        nn::Recompute{nn::RecomputeMode::full, 1}}) {
    p.recompute = r;
    expect_identical(testing::run_layout(model, p, kSteps), none, p.describe());
  }
}

RANK_TEST(LayoutRecomputeN2, DataParallelZero3) {
  nn::testing::OneThread one_thread;
  recompute_is_exact({.mesh = {2, 1, 1}, .zero = 3, .gpt2 = true});
  recompute_is_exact({.mesh = {2, 1, 1}, .zero = 2, .m = 2});
}

RANK_TEST(LayoutRecomputeN2, TensorAndSequenceParallel) {
  nn::testing::OneThread one_thread;
  recompute_is_exact({.mesh = {1, 1, 2}, .sp = true});
  recompute_is_exact({.mesh = {1, 1, 2}, .gpt2 = true});
}

RANK_TEST(LayoutRecomputeN2, PipelineAndInterleaved) {
  nn::testing::OneThread one_thread;
  recompute_is_exact({.mesh = {1, 2, 1}, .m = 2, .gpt2 = true});
  recompute_is_exact({.mesh = {1, 2, 1}, .schedule = ScheduleKind::interleaved, .v = 2, .m = 2});
}

RANK_TEST(LayoutRecomputeN2, Bf16) {
  nn::testing::OneThread one_thread;
  recompute_is_exact({.mesh = {2, 1, 1}, .zero = 1}, nn::Precision::bf16);
}

RANK_TEST(LayoutRecomputeN4, ThreeAxesWithZero3AndSequenceParallel) {
  nn::testing::OneThread one_thread;
  recompute_is_exact({.mesh = {2, 1, 2}, .zero = 3, .sp = true});
  recompute_is_exact({.mesh = {1, 2, 2}, .m = 2, .sp = true, .gpt2 = true});
}

}  // namespace
}  // namespace tessera::parallel
