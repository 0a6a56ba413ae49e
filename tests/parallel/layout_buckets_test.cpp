// --bucket-mb: DP gradient buckets packed by size instead of one per unit (ZeRO 0-2). The
// reduce-scatter sums every element over the ranks in rank order whatever its bucket
// (comm/mpi_communicator.cpp, thread_communicator.cpp), and AdamW is elementwise, so sized
// buckets keep the losses and weights of unit buckets bit for bit; only the global norm's
// grouping (per-shard partial sums) changes, so clipping is off here. The default the other
// layout tests rely on stays unit buckets; ZeRO-3 refuses a size.

#include <gtest/gtest.h>

#include "nn/tiny_models.h"
#include "parallel/layout_test_util.h"
#include "parallel/rank_test.h"

namespace tessera::parallel {
namespace {

using testing::LayoutRun;

constexpr int64_t kSteps = 3;

RANK_TEST(LayoutBucketsN2, SizedBucketsKeepTheBitsOfUnitBuckets) {
  nn::testing::OneThread one_thread;
  const nn::GPTConfig model = testing::layout_gpt2();
  for (int zero = 0; zero <= 2; ++zero) {
    ParallelConfig p = testing::layout_config({2, 1, 1});
    p.zero_stage = zero;
    p.max_grad_norm = 0;
    const LayoutRun units = testing::run_layout(model, p, kSteps);
    p.bucket_mb = 4.0 / 1024;  // 4 KiB: a tiny block (about 13 KiB) spans several buckets
    {
      ParallelTrainer t(testing::test_world(), model, p);
      const FlatLayout& sized = t.data_parallel().layout();
      EXPECT_TRUE(sized.units().empty());
      // The model has 6 units (embedding, 4 blocks, head); 4 KiB buckets make more.
      EXPECT_GT(sized.buckets().size(), 6u) << sized.buckets().size();
    }
    testing::expect_identical(testing::run_layout(model, p, kSteps), units, p.describe(),
                              /*norms=*/false);
  }
}

RANK_TEST(LayoutBucketsN2, Zero3RefusesABucketSize) {
  ParallelConfig p = testing::layout_config({2, 1, 1});
  p.zero_stage = 3;
  p.bucket_mb = 1;
  const std::string why = layout_error(p, testing::layout_gpt2(), 2);
  EXPECT_NE(why.find("under ZeRO-3"), std::string::npos) << why;
  p.zero_stage = 2;
  EXPECT_EQ(layout_error(p, testing::layout_gpt2(), 2), "");
  p.bucket_mb = -1;
  EXPECT_NE(layout_error(p, testing::layout_gpt2(), 2).find("bucket size"), std::string::npos);
}

}  // namespace
}  // namespace tessera::parallel
