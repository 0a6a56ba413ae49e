// ZeRO-3 prefetch (parallel/data/zero3_hooks.h): gathering the next unit while the current one
// computes changes when parameters arrive, never their values. dp2 ZeRO-3 with and without it
// trains to the same bits, under 1F1B too; from the second step on, the units that follow
// another are found prefetched, and an evaluation between steps neither records nor breaks it.

#include <gtest/gtest.h>

#include "parallel/layout_test_util.h"
#include "parallel/rank_test.h"

namespace tessera::parallel {
namespace {

using testing::LayoutRun;

struct PrefetchRun {
  LayoutRun run;
  int64_t prefetches = 0, hits = 0, gathers = 0;
};

PrefetchRun run_zero3(MeshShape mesh, bool prefetch, int microbatches = 1) {
  ParallelConfig p = testing::layout_config(mesh);
  p.zero_stage = 3;
  p.microbatches = microbatches;
  p.zero3_prefetch = prefetch;
  ParallelTrainer trainer(testing::test_world(), testing::layout_gpt2(), p);
  PrefetchRun r;
  for (int64_t step = 0; step < testing::kLayoutSteps; ++step) {
    const testing::Batch b = testing::global_batch(step, p.batch_size, p.seq_len, 61);
    const ParallelStepStats s = trainer.step(b.inputs, b.targets);
    r.run.losses.push_back(s.loss);
    r.run.norms.push_back(s.grad_norm);
    if (step == 4) trainer.evaluate(b.inputs, b.targets);  // untraced: the next step replays
  }
  const DataParallel& dp = trainer.data_parallel();
  r.prefetches = dp.prefetches();
  r.hits = dp.prefetch_hits();
  r.gathers = dp.gathers();
  r.run.weights = trainer.gather_full_state();
  return r;
}

void prefetch_keeps_the_bits(MeshShape mesh, int microbatches) {
  const PrefetchRun off = run_zero3(mesh, false, microbatches);
  const PrefetchRun on = run_zero3(mesh, true, microbatches);
  testing::expect_identical(on.run, off.run, "ZeRO-3 prefetch on against off");
  EXPECT_EQ(off.prefetches, 0);
  // GPT-2 with a tied head: units embedding, h.0-h.3, head (its own bucket and the tied wte).
  // Each step after the first replays the last one's trace: forward finds h.0-h.3 and both of
  // the head's buckets prefetched, backward h.3-h.0 and the embedding: 11 of a step's 14
  // gathers per micro-batch at dp2 (measured 99 = 9 x 11 over ten steps with an evaluation
  // after the fifth). Every prefetch was used (none left stale), and none added a gather.
  if (microbatches == 1) {
    EXPECT_EQ(on.hits, (testing::kLayoutSteps - 1) * 11);
  }
  EXPECT_GT(on.hits, 0);
  EXPECT_EQ(on.hits, on.prefetches);
  EXPECT_EQ(on.gathers, off.gathers);
  if (testing::test_world()->rank() == 0)
    std::printf("  zero3 prefetch (m%d): %lld of %lld gathers prefetched and used\n", microbatches,
                static_cast<long long>(on.hits), static_cast<long long>(on.gathers));
}

RANK_TEST(LayoutPrefetchN2, Zero3PrefetchKeepsTheBits) {
  prefetch_keeps_the_bits({2, 1, 1}, 1);
}
RANK_TEST(LayoutPrefetchN4, Zero3PrefetchKeepsTheBitsUnder1F1B) {
  prefetch_keeps_the_bits({2, 2, 1}, 2);
}

}  // namespace
}  // namespace tessera::parallel
