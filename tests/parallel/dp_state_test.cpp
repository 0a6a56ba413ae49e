// The optimizer state of DataParallel in nn::AdamW's checkpoint format: equal to one
// process's after the same steps, and a run stopped at any stage and resumed at another
// continues bit for bit as if it had not stopped (all stages compute the same bits on one
// layout, so the stage a run resumes with does not matter).

#include <gtest/gtest.h>

#include "nn/tiny_models.h"
#include "parallel/dp_test_util.h"
#include "parallel/rank_test.h"

namespace tessera::parallel {
namespace {

using testing::RunResult;
using testing::RunSpec;
using testing::TestModel;

DataParallelConfig with_units(const TestModel& model, int stage) {
  DataParallelConfig c;
  c.zero_stage = stage;
  c.units = gpt_units(model.module->named_parameters());
  return c;
}

RANK_TEST(DataParallelStateN2, GatheredStateMatchesOneProcessAtEveryStage) {
  nn::testing::OneThread one_thread;
  auto world = testing::test_world();
  RunSpec spec;
  spec.steps = 3;
  nn::OptimizerState ref;
  testing::run_single(testing::unit_stack(), spec, &ref);
  for (int stage = 0; stage <= 3; ++stage) {
    TestModel model = testing::unit_stack();
    nn::OptimizerState got;
    testing::run_data_parallel(model, *world, with_units(model, stage), spec, nullptr, &got);
    EXPECT_EQ(got.scalars, ref.scalars) << "zero" << stage;
    ASSERT_EQ(got.tensors.size(), ref.tensors.size());
    for (size_t i = 0; i < got.tensors.size(); ++i) {
      ASSERT_EQ(got.tensors[i].first, ref.tensors[i].first);
      // The moments follow the gradients, which differ from one process's by the reordered
      // batch sums (dp_equivalence_test.cpp): ~1e-7 relative, bounded by 1e-5 there too.
      std::vector<float> a = to_vector<float>(got.tensors[i].second);
      std::vector<float> b = to_vector<float>(ref.tensors[i].second);
      double diff = 0, norm = 0;
      for (size_t k = 0; k < a.size(); ++k) {
        diff += (double(a[k]) - b[k]) * (double(a[k]) - b[k]);
        norm += double(b[k]) * b[k];
      }
      EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm)) << got.tensors[i].first;
    }
  }
}

RANK_TEST(DataParallelStateN2, StopAtOneStageResumeAtAnotherContinuesExactly) {
  nn::testing::OneThread one_thread;
  auto world = testing::test_world();
  RunSpec spec;
  spec.steps = 4;
  TestModel straight = testing::unit_stack();
  RunResult want = testing::run_data_parallel(straight, *world, with_units(straight, 1), spec);

  for (auto [first, second] : {std::pair{1, 3}, std::pair{3, 0}, std::pair{2, 2}}) {
    RunSpec half = spec;
    half.steps = 2;
    TestModel a = testing::unit_stack();
    nn::OptimizerState saved;
    RunResult head =
        testing::run_data_parallel(a, *world, with_units(a, first), half, nullptr, &saved);
    // A fresh model loads the saved weights, a fresh DataParallel the saved optimizer state.
    TestModel b = testing::unit_stack();
    nn::StateDict weights;
    for (const auto& [name, v] : head.weights)
      weights.emplace_back(
          name, from_vector<float>(v, nn::find_tensor(b.module->named_parameters(), name).shape()));
    b.module->load_state_dict(weights);
    half.first_step = 2;
    RunResult tail = testing::run_data_parallel(b, *world, with_units(b, second), half, &saved);
    const std::string what = "zero" + std::to_string(first) + " -> zero" + std::to_string(second);
    EXPECT_EQ(head.losses[0], want.losses[0]) << what;
    EXPECT_EQ(head.losses[1], want.losses[1]) << what;
    EXPECT_EQ(tail.losses[0], want.losses[2]) << what;
    EXPECT_EQ(tail.losses[1], want.losses[3]) << what;
    for (size_t i = 0; i < tail.weights.size(); ++i)
      ASSERT_EQ(tail.weights[i].second, want.weights[i].second)
          << what << " " << tail.weights[i].first;
  }
}

RANK_TEST(DataParallelStateN2, AStateForOtherParametersIsRejectedBeforeAnythingChanges) {
  auto world = testing::test_world();
  TestModel small = testing::unit_stack(29, 16, 2), big = testing::unit_stack(29, 16, 3);
  DataParallel a(small.module->named_parameters(), *world, with_units(small, 1));
  DataParallel b(big.module->named_parameters(), *world, with_units(big, 1));
  nn::OptimizerState s = a.optimizer_state();
  EXPECT_THROW(b.load_optimizer_state(s), Error);
  EXPECT_EQ(b.step_count(), 0);
}

}  // namespace
}  // namespace tessera::parallel
