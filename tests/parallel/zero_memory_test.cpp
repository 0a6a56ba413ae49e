// Per-rank memory at dp = 4: ZeRO >= 1 holds a quarter of stage 0's optimizer state, ZeRO >= 2
// a quarter of its gradients, ZeRO-3 a quarter of its parameters, and while the model runs at
// most its shard plus the units in use plus the prefetch window (one unit more).
//
// Measured two ways, between steps (after step() and zero_grad()):
//  - DataParallel::memory(): the bytes of the buffers it owns, per category. This is the
//    figure asserted, because the allocator's live counter is process-wide and cannot tell a
//    gradient from a parameter.
//  - The allocator's live bytes since before the model was built, as a cross-check that the
//    whole footprint shrinks (nothing the categories miss is left holding full-size memory).
//
// The stated constant: every stage pads the same layout (one bucket per unit) to a multiple of
// 4 x 16 elements, and stage 0 holds that padding too, so a quarter of stage 0 already covers
// a shard's padding; the slack allowed is one 64-byte line per bucket and buffer (alignment of
// a shard's start), kSlackPerBucket below.

#include <gtest/gtest.h>

#include <cstdio>

#include "nn/tiny_models.h"
#include "parallel/dp_test_util.h"
#include "tessera/parallel/comm/mpi_communicator.h"

namespace tessera::parallel {
namespace {

constexpr int64_t kSlackPerBucket = FlatLayout::kShardAlign * int64_t(sizeof(float));

struct Measured {
  MemoryStats stats;
  int64_t live = 0;  // allocator live bytes since before the model existed
  int64_t buckets = 0;
  int64_t largest_two_buckets = 0;  // bytes: the head gathers its own bucket and the embedding
  int64_t largest_three_buckets = 0;  // and the prefetch window: the next unit's bucket
  int64_t prefetch_hits = 0;
};

Measured measure(int stage, Communicator& dp, bool prefetch = true) {
  nn::testing::OneThread one_thread;
  Allocator& alloc = allocator_for(Device::cpu());
  const int64_t live0 = alloc.stats().live_bytes;
  Measured m;
  {
    testing::TestModel model = testing::unit_stack(/*vocab=*/64, /*width=*/32, /*layers=*/4);
    DataParallelConfig c;
    c.zero_stage = stage;
    c.units = gpt_units(model.module->named_parameters());
    c.zero3_prefetch = prefetch;
    DataParallel ddp(model.module->named_parameters(), dp, c);
    if (ddp.unit_hooks()) model.set_hooks(ddp.unit_hooks());
    for (int64_t step = 0; step < 3; ++step) {  // the second and third replay a trace
      testing::Batch b = testing::rows(testing::global_batch(step, 8, 8, 64), 2 * dp.rank(), 2);
      ddp.backward(model.loss(b.inputs, b.targets));
      ddp.step();
      ddp.zero_grad();
    }
    m.stats = ddp.memory();
    m.live = alloc.stats().live_bytes - live0;
    m.buckets = int64_t(ddp.layout().buckets().size());
    std::vector<int64_t> sizes;
    for (const auto& b : ddp.layout().buckets()) sizes.push_back(b.numel * 4);
    std::sort(sizes.rbegin(), sizes.rend());
    m.largest_two_buckets = sizes[0] + sizes[1];
    m.largest_three_buckets = m.largest_two_buckets + sizes[2];
    m.prefetch_hits = ddp.prefetch_hits();
    model.set_hooks(nullptr);
  }
  return m;
}

TEST(ZeroMemoryN4, ShardedStagesHoldAQuarterOfStageZero) {
  auto world = MpiCommunicator::world();
  ASSERT_EQ(world->size(), 4);
  std::vector<Measured> m;
  for (int stage = 0; stage <= 3; ++stage) m.push_back(measure(stage, *world));
  if (world->rank() == 0) {
    std::printf("  per-rank bytes at dp 4 (params / grads / optimizer state / all live):\n");
    for (int s = 0; s <= 3; ++s)
      std::printf("    zero%d: %7lld / %7lld / %7lld / %7lld  (parameter peak %lld)\n", s,
                  (long long)m[s].stats.parameters, (long long)m[s].stats.gradients,
                  (long long)m[s].stats.optimizer_state, (long long)m[s].live,
                  (long long)m[s].stats.parameters_peak);
  }
  const Measured& base = m[0];
  const int64_t slack = kSlackPerBucket * base.buckets;
  for (int s = 1; s <= 3; ++s)
    EXPECT_LE(m[s].stats.optimizer_state, base.stats.optimizer_state / 4 + 2 * slack)
        << "zero" << s;  // two moments
  for (int s = 2; s <= 3; ++s)
    EXPECT_LE(m[s].stats.gradients, base.stats.gradients / 4 + slack) << "zero" << s;
  EXPECT_LE(m[3].stats.parameters, base.stats.parameters / 4 + slack);
  // Below ZeRO-3 parameters are whole; ZeRO-1 keeps the full gradient as well as its shard.
  EXPECT_EQ(m[2].stats.parameters, base.stats.parameters);
  EXPECT_GT(m[1].stats.gradients, base.stats.gradients);
  // ZeRO-3 holds at most its shard plus the units gathered at once (the tied head reads two
  // buckets) and, with prefetch, the next unit's bucket while the model runs, and frees them
  // after. Without prefetch the window is one unit smaller.
  EXPECT_LE(m[3].stats.parameters_peak, m[3].stats.parameters + base.largest_three_buckets);
  EXPECT_GT(m[3].stats.parameters_peak, m[3].stats.parameters);
  EXPECT_GT(m[3].prefetch_hits, 0);
  const Measured no_prefetch = measure(3, *world, false);
  EXPECT_EQ(no_prefetch.prefetch_hits, 0);
  EXPECT_LE(no_prefetch.stats.parameters_peak,
            no_prefetch.stats.parameters + base.largest_two_buckets);
  EXPECT_EQ(no_prefetch.stats.parameters, m[3].stats.parameters);
  if (world->rank() == 0)
    std::printf("    zero3 parameter peak: %lld with prefetch, %lld without (%lld prefetched)\n",
                (long long)m[3].stats.parameters_peak, (long long)no_prefetch.stats.parameters_peak,
                (long long)m[3].prefetch_hits);
  // Cross-check with the allocator: parameters + gradients + state are everything that stays
  // alive, so the whole footprint shrinks by the same factor.
  for (int s = 0; s <= 3; ++s)
    EXPECT_EQ(m[s].live, m[s].stats.parameters + m[s].stats.gradients + m[s].stats.optimizer_state)
        << "zero" << s;
  EXPECT_LE(m[3].live, base.live / 4 + 4 * slack);
}

}  // namespace
}  // namespace tessera::parallel
