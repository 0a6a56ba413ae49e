// Young's interval minimises the share of time lost, against a brute-force scan; and the
// docs' worked example.

#include <gtest/gtest.h>

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/plan/economics.h"

namespace tessera::plan {
namespace {

double waste(double tau, double d, double R, double M) {
  return d / tau + (tau / 2 + R) / M;
}

TEST(Economics, DalyIntervalMinimisesWaste) {
  for (int nodes : {1, 16, 128, 1250})
    for (double d : {0.5, 5.0, 60.0})
      for (double R : {0.0, 120.0, 900.0}) {
        FailureModel f{0.05, d, R};
        const CheckpointEconomics e = checkpoint_economics(nodes, f);
        EXPECT_DOUBLE_EQ(e.mtbf_s, 86400.0 / (nodes * 0.05));
        double best = INFINITY;
        for (double tau = 1; tau < 4 * e.mtbf_s; tau *= 1.001)
          best = std::min(best, waste(tau, d, R, e.mtbf_s));
        // Young's interval is the minimum (the scan's 0.1% steps find it to 1e-6).
        EXPECT_LE(e.waste, best * (1 + 1e-6)) << nodes << " nodes, d " << d << ", R " << R;
        EXPECT_NEAR(e.goodput, 1 - e.waste, 1e-15);
        EXPECT_NEAR(e.lost_per_failure_s, e.interval_s / 2 + R, 1e-9);
      }
}

// docs/resilience.md: 1,000 GPUs at 8 per node, 5% of nodes a day: M = 13,824 s; with
// d = 1.5 s and R = 60 s, tau = sqrt(2 d M) = 203.6 s.
TEST(Economics, WorkedExample) {
  const CheckpointEconomics e = checkpoint_economics(125, {0.05, 1.5, 60});
  EXPECT_DOUBLE_EQ(e.mtbf_s, 13824);
  EXPECT_NEAR(e.interval_s, std::sqrt(2 * 1.5 * 13824), 1e-9);
  EXPECT_NEAR(e.interval_s, 203.6, 0.1);
  EXPECT_NEAR(e.waste, 1.5 / e.interval_s + (e.interval_s / 2 + 60) / 13824, 1e-12);
}

// A save cannot start before the last is on disk: with background saves (no stall) the
// interval is the write time, not zero.
TEST(Economics, IntervalAtLeastTheWrite) {
  FailureModel f{0.05, 0.0, 60, 90};
  EXPECT_DOUBLE_EQ(checkpoint_economics(128, f).interval_s, 90);
  f.save_stall_s = 4;  // sqrt(2 x 4 x 13,500) = 328.6 s, longer than the write
  EXPECT_NEAR(checkpoint_economics(128, f).interval_s, std::sqrt(2 * 4 * 86400.0 / 6.4), 1e-9);
}

// The defaults: 12 bytes a parameter written by every node at the storage bandwidth; the
// restart relaunches and reads it back.
TEST(Economics, CheckpointPlanFromTheModel) {
  CheckpointInputs in;  // 2 GB/s per node, 120 s relaunch
  const CheckpointPlan p = plan_checkpoints(int64_t(70e9), 128, 0, in);
  EXPECT_DOUBLE_EQ(p.checkpoint_bytes, 840e9);
  EXPECT_DOUBLE_EQ(p.model.write_s, 840e9 / (128 * 2e9));
  EXPECT_DOUBLE_EQ(p.model.save_stall_s, p.model.write_s);  // a synchronous save
  EXPECT_DOUBLE_EQ(p.model.restart_s, 120 + p.model.write_s);
  in.save_stall_s = 0.5;
  in.storage_gbps = 0;
  EXPECT_THROW(plan_checkpoints(1000, 1, 0, in), Error);
}

TEST(Economics, BadFiguresAreRefused) {
  EXPECT_THROW(checkpoint_economics(0, {}), Error);
  EXPECT_THROW(checkpoint_economics(8, {-0.1, 1, 1}), Error);
  EXPECT_THROW(checkpoint_economics(8, {0.05, NAN, 1}), Error);
  EXPECT_EQ(checkpoint_economics(8, {0.0, 1, 1}).goodput, 1);  // nothing fails
}

}  // namespace
}  // namespace tessera::plan
