// Young's interval minimises the share of time lost, against a brute-force scan; and the
// docs' worked example.

#include <gtest/gtest.h>

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/plan/detail/text.h"
#include "tessera/plan/economics.h"
#include "tessera/plan/report.h"

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

// The figures a user gives are bounded to what clusters span; beyond them the line printed
// "-9223372036854775808 failures" (a double past int64 cast) or 150-digit times.
TEST(Economics, GivenFiguresOutsideWhatClustersSpanAreRefused) {
  auto refused = [](CheckpointInputs in, const std::string& says) {
    try {
      in.validate();
      ADD_FAILURE() << "accepted: " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
    EXPECT_THROW(plan_checkpoints(1000, 1, 0, in), Error) << says;
  };
  CheckpointInputs in;
  in.node_failures_per_day = 1e300;
  refused(in, "node failure rate (per node and day) must be in [0, 100], got 1e+300");
  in = {};
  in.storage_gbps = 1e-300;
  refused(in, "storage bandwidth (GB/s per node) must be in [0.001, 100000], got 1e-300");
  in = {};
  in.save_stall_s = -5;  // only -1 means "the write"
  refused(in, "save stall (s; -1: the write) must be in [0, 1e+06], got -5");
  in = {};
  in.restart_s = 2e6;
  refused(in, "restart time (s; -1: relaunch and read back) must be in [0, 1e+06], got 2e+06");
  in = {};
  in.relaunch_s = NAN;
  refused(in, "relaunch time (s) must be in [0, 1e+06], got nan");
}

// At the ends of the ranges the figures are huge but finite, and print as such: the count of
// failures was an int64 cast of a double, undefined past 2^63.
TEST(Economics, HugeFiguresPrintAsSignificantDigits) {
  CheckpointInputs in;
  in.node_failures_per_day = 100;
  in.storage_gbps = 1e-3;
  const CheckpointPlan p = plan_checkpoints(int64_t(4e11), 1, 4.6e22, in);  // 1.5e15 years
  EXPECT_GT(p.economics.failures, 9.3e18);                                  // past int64
  const std::string line = format_checkpoints(p, 5.3e17);
  EXPECT_NE(line.find("4.8e+03 GB save"), std::string::npos) << line;
  EXPECT_NE(line.find(detail::significant(p.economics.failures) + " failures expected over the "
                                                                  "5.3e+17 days"),
            std::string::npos)
      << line;
  EXPECT_EQ(line.find("-92233720"), std::string::npos) << line;
  EXPECT_EQ(detail::fixed(1e300, 1), "1e+300");
  EXPECT_EQ(detail::fixed(INFINITY, 1), "inf");
  EXPECT_EQ(detail::fixed(123456789012345.0, 1), "123456789012345.0");  // below 1e15: digits
  EXPECT_EQ(detail::fixed(2.5e15, 1), "2.5e+15");
}

// A run shorter than a day: its days and expected failures keep their digits. gpt2-d12 on 1B
// tokens and 8 H100s printed "0 failures expected over the 0 days" and 0.0 days a row.
TEST(Economics, ShortRunsKeepTheirDigits) {
  const CheckpointPlan p = plan_checkpoints(int64_t(124e6), 1, 0.00391 * 86400, CheckpointInputs{});
  const std::string line = format_checkpoints(p, 0.00391);
  EXPECT_NE(line.find(detail::significant(p.economics.failures) + " failures expected over the "
                                                                  "0.00391 days"),
            std::string::npos)
      << line;
  EXPECT_EQ(detail::fixed_or_small(0.00391, 1), "0.00391");
  EXPECT_EQ(detail::fixed_or_small(0, 1), "0.0");
  EXPECT_EQ(detail::fixed_or_small(34.04, 1), "34.0");
}

}  // namespace
}  // namespace tessera::plan
