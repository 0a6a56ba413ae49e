// The continuous-batching scheduler and the block allocator, without a model: token budgets,
// chunked prefill, admission order, a full cache queueing instead of failing, preemption, and
// the KV waste bound (under one block per sequence).

#include <gtest/gtest.h>

#include <memory>
#include <numeric>

#include "tessera/core/error.h"
#include "tessera/serve/scheduler.h"

namespace tessera::serve {
namespace {

std::shared_ptr<Sequence> sequence(int64_t id, int64_t prompt) {
  auto s = std::make_shared<Sequence>();
  s->id = id;
  s->tokens.assign(size_t(prompt), 7);
  s->prompt_length = prompt;
  return s;
}

// What the engine does after the forward pass: every sampling segment gains a token.
void run(Scheduler& scheduler, const Iteration& it) {
  scheduler.advance(it);
  for (const ScheduledSegment& s : it.segments)
    if (s.samples) s.sequence->tokens.push_back(1);
}

TEST(BlockAllocator, GrowsByBlocksAndRefusesWhatItLacks) {
  BlockAllocator a(4, 3);
  std::vector<int32_t> t1, t2;
  EXPECT_TRUE(a.grow(t1, 1));
  EXPECT_EQ(t1, (std::vector<int32_t>{0}));
  EXPECT_TRUE(a.grow(t1, 3));  // still one block
  EXPECT_EQ(a.used_blocks(), 1);
  EXPECT_TRUE(a.grow(t1, 7));  // three blocks
  EXPECT_EQ(t1, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FALSE(a.grow(t2, 4));  // two needed, one free: nothing taken
  EXPECT_TRUE(t2.empty());
  EXPECT_EQ(a.free_blocks(), 1);
  a.release(t1);
  EXPECT_TRUE(t1.empty());
  EXPECT_EQ(a.free_blocks(), 4);
  EXPECT_TRUE(a.grow(t2, 4));
  EXPECT_EQ(t2, (std::vector<int32_t>{0, 1}));  // freed blocks come back in order
  EXPECT_THROW(BlockAllocator(0, 4), Error);
  EXPECT_THROW(BlockAllocator(4, 0), Error);
}

TEST(Scheduler, DecodesFirstThenChunksPromptsIntoTheBudget) {
  BlockAllocator blocks(64, 4);
  Scheduler s({.max_batch_tokens = 8, .max_running = 8, .chunked_prefill = true}, blocks);
  s.add(sequence(1, 3));
  Iteration it = s.schedule();
  ASSERT_EQ(it.segments.size(), 1u);
  EXPECT_TRUE(it.segments[0].samples);
  run(s, it);
  s.add(sequence(2, 20));  // longer than the budget
  it = s.schedule();
  ASSERT_EQ(it.segments.size(), 2u);
  EXPECT_EQ(it.segments[0].sequence->id, 1);  // the decode goes first
  EXPECT_EQ(it.segments[0].length, 1);
  EXPECT_EQ(it.segments[1].length, 7);  // the chunk takes the rest of the budget
  EXPECT_FALSE(it.segments[1].samples);
  run(s, it);
  it = s.schedule();
  EXPECT_EQ(it.segments[1].start, 7);
  EXPECT_EQ(it.segments[1].length, 7);
  run(s, it);
  it = s.schedule();
  EXPECT_EQ(it.segments[1].length, 6);  // the last chunk reaches the end and samples
  EXPECT_TRUE(it.segments[1].samples);
  EXPECT_EQ(it.num_tokens(), 7);
}

TEST(Scheduler, WithoutChunkingAPromptWaitsUntilItFitsWhole) {
  BlockAllocator blocks(64, 4);
  Scheduler s({.max_batch_tokens = 8, .max_running = 8, .chunked_prefill = false}, blocks);
  s.add(sequence(1, 5));
  s.add(sequence(2, 4));
  const Iteration it = s.schedule();
  ASSERT_EQ(it.segments.size(), 1u);  // 5 + 4 > 8: the second waits, FIFO
  EXPECT_EQ(it.segments[0].length, 5);
  EXPECT_EQ(s.num_waiting(), 1);
}

TEST(Scheduler, AFullCacheQueuesNewRequests) {
  BlockAllocator blocks(4, 4);  // 16 positions in all
  Scheduler s({.max_batch_tokens = 64, .max_running = 8}, blocks);
  s.add(sequence(1, 8));
  s.add(sequence(2, 8));
  s.add(sequence(3, 4));
  Iteration it = s.schedule();
  EXPECT_EQ(it.admitted, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(s.num_waiting(), 1);  // queued, not failed
  EXPECT_EQ(blocks.free_blocks(), 0);
  run(s, it);
  ASSERT_TRUE(s.remove(1));  // sequence 1 finishes: its two blocks come back
  it = s.schedule();
  EXPECT_EQ(it.admitted, (std::vector<int64_t>{3}));
  EXPECT_EQ(s.num_waiting(), 0);
}

TEST(Scheduler, PreemptsTheNewestWhenBlocksRunOutAndResumesIt) {
  BlockAllocator blocks(4, 2);  // 8 positions
  Scheduler s({.max_batch_tokens = 64, .max_running = 8}, blocks);
  auto a = sequence(1, 4), b = sequence(2, 4);
  s.add(a);
  s.add(b);
  run(s, s.schedule());               // both prefill: 4 blocks used, each has 5 tokens, 4 computed
  const Iteration it = s.schedule();  // a's 5th position needs a block: b gives way
  EXPECT_EQ(it.preempted, (std::vector<int64_t>{2}));
  ASSERT_EQ(it.segments.size(), 1u);
  EXPECT_EQ(it.segments[0].sequence->id, 1);
  EXPECT_EQ(b->computed, 0);
  EXPECT_TRUE(b->blocks.empty());
  EXPECT_EQ(b->tokens.size(), 5u);  // its generated token is kept
  EXPECT_EQ(s.num_waiting(), 1);
  EXPECT_EQ(s.num_preemptions(), 1);
  run(s, it);
  ASSERT_TRUE(s.remove(1));
  const Iteration back = s.schedule();  // b recomputes all 5 tokens, then samples its 6th
  ASSERT_EQ(back.segments.size(), 1u);
  EXPECT_EQ(back.segments[0].length, 5);
  EXPECT_TRUE(back.segments[0].samples);
}

// Waste = reserved positions - cached positions; a block table grows only when a position
// needs it, so every sequence wastes less than one block, at every iteration.
TEST(Scheduler, KvWasteStaysUnderOneBlockPerSequence) {
  BlockAllocator blocks(200, 16);
  Scheduler s({.max_batch_tokens = 48, .max_running = 12}, blocks);
  std::vector<std::shared_ptr<Sequence>> all;
  for (int64_t i = 0; i < 12; ++i) {
    all.push_back(sequence(i, 1 + 13 * i % 61));
    s.add(all.back());
  }
  int64_t checked = 0;
  for (int step = 0; step < 120; ++step) {
    const Iteration it = s.schedule();
    run(s, it);
    for (const auto& q : all) {
      if (q->blocks.empty()) continue;
      const int64_t reserved = int64_t(q->blocks.size()) * 16;
      EXPECT_GE(reserved, q->computed);
      EXPECT_LT(reserved - q->computed, 16) << "sequence " << q->id << " at iteration " << step;
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000);
}

// The baseline: nobody joins a batch until all of it has finished.
TEST(Scheduler, StaticBatchingAdmitsOnlyIntoAnEmptyBatch) {
  BlockAllocator blocks(64, 4);
  Scheduler s({.max_batch_tokens = 64, .max_running = 2, .static_batching = true}, blocks);
  s.add(sequence(1, 2));
  s.add(sequence(2, 2));
  s.add(sequence(3, 2));
  Iteration it = s.schedule();
  EXPECT_EQ(it.admitted, (std::vector<int64_t>{1, 2}));
  run(s, it);
  ASSERT_TRUE(s.remove(1));  // a slot frees up, but the batch is still running
  it = s.schedule();
  EXPECT_TRUE(it.admitted.empty());
  EXPECT_EQ(it.segments.size(), 1u);
  run(s, it);
  ASSERT_TRUE(s.remove(2));
  EXPECT_EQ(s.schedule().admitted, (std::vector<int64_t>{3}));
}

// A static batch is max_running requests whatever one iteration's budget holds (it was what
// fit one budget: 8 prompts of 40 tokens under 64 made a batch of two). Its prompts but their
// last tokens fill the budget first; then one iteration samples every first token together,
// and the batch decodes as one until its last sequence leaves.
TEST(Scheduler, StaticBatchFormsWholeThenDecodesTogether) {
  BlockAllocator blocks(128, 16);
  Scheduler s({.max_batch_tokens = 64, .max_running = 8, .static_batching = true}, blocks);
  for (int64_t id = 1; id <= 9; ++id) s.add(sequence(id, 40));
  Iteration it = s.schedule();
  EXPECT_EQ(it.admitted, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(s.num_running(), 8);
  // 8 x 39 = 312 prompt tokens before the first decode: ceil(312 / 64) = 5 iterations.
  int prefill_iterations = 0;
  while (true) {
    bool samples = false;
    for (const ScheduledSegment& seg : it.segments) samples = samples || seg.samples;
    if (samples) break;
    EXPECT_LE(it.num_tokens(), 64);
    ++prefill_iterations;
    run(s, it);
    it = s.schedule();
    EXPECT_TRUE(it.admitted.empty());
  }
  EXPECT_EQ(prefill_iterations, 5);
  ASSERT_EQ(it.segments.size(), 8u);  // every last prompt token, every first sample
  for (const ScheduledSegment& seg : it.segments) {
    EXPECT_EQ(seg.length, 1);
    EXPECT_TRUE(seg.samples);
  }
  run(s, it);
  for (int64_t id = 1; id <= 7; ++id) ASSERT_TRUE(s.remove(id));
  it = s.schedule();  // one left: still the batch, nobody joins
  EXPECT_TRUE(it.admitted.empty());
  EXPECT_EQ(it.segments.size(), 1u);
  run(s, it);
  ASSERT_TRUE(s.remove(8));
  EXPECT_EQ(s.schedule().admitted, (std::vector<int64_t>{9}));
}

TEST(Scheduler, LimitsAreChecked) {
  BlockAllocator blocks(4, 4);
  EXPECT_THROW(Scheduler({.max_batch_tokens = 0}, blocks), Error);
  EXPECT_THROW(Scheduler({.max_running = 0}, blocks), Error);
  Scheduler s({.max_batch_tokens = 64, .max_running = 1}, blocks);
  s.add(sequence(1, 2));
  s.add(sequence(2, 2));
  EXPECT_EQ(s.schedule().admitted.size(), 1u);  // max_running
  EXPECT_FALSE(s.remove(99));
}

}  // namespace
}  // namespace tessera::serve
