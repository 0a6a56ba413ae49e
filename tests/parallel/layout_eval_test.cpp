// ParallelTrainer::evaluate, the forward-only pass for validation, under every kind of layout:
// after two training steps, the loss of a held-out batch equals the single-process model's
// (nn::GPT::loss in eval mode, with the reference run's weights) on every rank, and the pass
// leaves the weights, the optimizer state and the step exactly as they were.
//
// Tolerance, 1e-5 relative: the layout computes the same loss in other groupings (tp's
// row-parallel all-reduce and vocab-parallel log-sum-exp, the mean of per-micro-batch and
// per-dp-rank means), each about 1e-7 relative in f32, on weights that two training steps
// under the layout put within about 1e-6 of the reference's (layout_equivalence_test.cpp
// measures at most 2.8e-6 after ten steps).

#include <cstring>
#include <string>

#include "nn/tiny_models.h"
#include "parallel/layout_test_util.h"
#include "parallel/rank_test.h"

namespace tessera::parallel {
namespace {

using testing::Batch;
using testing::global_batch;
using testing::layout_config;
using testing::layout_gpt2;
using testing::layout_llama;

constexpr double kRelTol = 1e-5;  // see the file comment
constexpr int64_t kTrainSteps = 2;

// The single-process loss of a batch in eval mode.
double reference_loss(nn::GPT& gpt, const Batch& b) {
  NoGradGuard no_grad;
  gpt.eval();
  const double loss = gpt.loss(b.inputs, b.targets).item<double>();
  gpt.train();
  return loss;
}

// Whether two state dicts hold the same names and bit-identical values.
void expect_identical(const nn::StateDict& a, const nn::StateDict& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first) << what;
    ASSERT_EQ(a[i].second.shape(), b[i].second.shape()) << what << " " << a[i].first;
    const std::vector<float> x = to_vector<float>(a[i].second), y = to_vector<float>(b[i].second);
    EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0)
        << what << ": evaluate changed " << a[i].first;
  }
}

// The same value on every rank of the world, to the bit.
void expect_same_on_every_rank(double x, const std::string& what) {
  Tensor extremes = from_vector<double>({x, -x}, Shape{2});  // max and -min
  testing::test_world()->all_reduce(extremes, CommOp::max);
  const std::vector<double> e = to_vector<double>(extremes);
  EXPECT_EQ(e[0], -e[1]) << what;
}

using Case = testing::LayoutCase;

void run_cases(const std::vector<Case>& cases) {
  nn::testing::OneThread one_thread;
  // A batch of the training size and a smaller one (fewer micro-batches than training's m).
  const Batch full = global_batch(1000, 8, 8, layout_llama().vocab_size);
  const Batch half = global_batch(1001, 4, 8, layout_llama().vocab_size);
  for (const Case& c : cases) {
    const nn::GPTConfig model = testing::case_model(c);
    const ParallelConfig p = testing::case_config(c);
    const std::string what = std::string(c.gpt2 ? "gpt2 " : "llama ") + p.describe();

    const testing::LayoutRun ref = testing::run_reference(model, p, kTrainSteps);
    nn::GPT gpt(model);
    gpt.load_state_dict(ref.weights);

    ParallelTrainer trainer(testing::test_world(), model, p);
    for (int64_t step = 0; step < kTrainSteps; ++step) {
      const Batch b = global_batch(step, p.batch_size, p.seq_len, model.vocab_size);
      trainer.step(b.inputs, b.targets);
    }
    const nn::StateDict weights = trainer.gather_full_state();
    const nn::OptimizerState optimizer = trainer.gather_full_optimizer_state();

    for (const Batch* b : {&full, &half}) {
      const std::string batch = what + " batch " + std::to_string(b->inputs.size(0));
      const double got = trainer.evaluate(b->inputs, b->targets);
      const double want = reference_loss(gpt, *b);
      EXPECT_LE(std::abs(got - want) / want, kRelTol) << batch << ": " << got << " vs " << want;
      expect_same_on_every_rank(got, batch);
      if (testing::test_world()->rank() == 0)
        std::printf("  %-56s eval loss rel. error %.1e\n", batch.c_str(),
                    std::abs(got - want) / want);
    }
    EXPECT_EQ(trainer.steps_done(), kTrainSteps) << what;
    EXPECT_EQ(trainer.data_parallel().step_count(), kTrainSteps) << what;
    expect_identical(trainer.gather_full_state(), weights, what + " weights");
    expect_identical(trainer.gather_full_optimizer_state().tensors, optimizer.tensors,
                     what + " optimizer state");
    for (const auto& chunk : trainer.chunks())
      EXPECT_TRUE(chunk->is_training()) << what << ": evaluate left a chunk in eval mode";
  }
}

constexpr auto k1F1B = ScheduleKind::one_f_one_b;
constexpr auto kInterleaved = ScheduleKind::interleaved;

RANK_TEST(LayoutEvalN2, DataParallel) {
  run_cases({{{2, 1, 1}, 0, k1F1B, 1, 2}, {{2, 1, 1}, 3, k1F1B, 1, 2, false, true}});
}

RANK_TEST(LayoutEvalN2, TensorParallelWithAndWithoutSequenceParallelism) {
  run_cases({{{1, 1, 2}, 0, k1F1B, 1, 1, false}, {{1, 1, 2}, 0, k1F1B, 1, 2, true, true}});
}

RANK_TEST(LayoutEvalN2, Pipeline) {
  run_cases({{{1, 2, 1}, 0, k1F1B, 1, 2}, {{1, 2, 1}, 0, kInterleaved, 2, 2, false, true}});
}

// Dropout is off during evaluate: with dropout 0.5 on trained weights (at init the logits are
// near zero and dropout barely moves the loss), the eval-mode loss differs from the
// training-mode one by far more than the tolerance, and evaluate gives the eval-mode one.
RANK_TEST(LayoutEvalN2, DropoutIsOff) {
  nn::testing::OneThread one_thread;
  const ParallelConfig p = layout_config({1, 2, 1});
  const testing::LayoutRun trained = testing::run_reference(layout_llama(), p);
  nn::GPTConfig model = layout_llama();
  model.dropout = 0.5;
  const Batch b = global_batch(1000, 8, 8, model.vocab_size);
  nn::GPT gpt(model);
  gpt.load_state_dict(trained.weights);
  const double eval_loss = reference_loss(gpt, b);
  const double train_loss = gpt.loss(b.inputs, b.targets).item<double>();
  ASSERT_GT(std::abs(train_loss - eval_loss) / eval_loss, 100 * kRelTol);
  ParallelTrainer trainer(testing::test_world(), model, p);
  trainer.load_full_state(trained.weights);
  const double got = trainer.evaluate(b.inputs, b.targets);
  EXPECT_LE(std::abs(got - eval_loss) / eval_loss, kRelTol) << got << " vs " << eval_loss;
  for (const auto& chunk : trainer.chunks()) EXPECT_TRUE(chunk->is_training());
}

RANK_TEST(LayoutEvalN2, RejectsABatchThatDoesNotSplitOverDp) {
  nn::testing::OneThread one_thread;
  ParallelTrainer trainer(testing::test_world(), layout_llama(), layout_config({2, 1, 1}));
  const Batch b = global_batch(0, 3, 8, layout_llama().vocab_size);
  try {
    trainer.evaluate(b.inputs, b.targets);
    ADD_FAILURE() << "evaluate accepted 3 rows over dp 2";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("divisible by dp 2"), std::string::npos) << e.what();
  }
}

RANK_TEST(LayoutEvalN4, TensorParallelPipeline) {
  run_cases({{{1, 2, 2}, 0, k1F1B, 1, 2, true}, {{2, 1, 2}, 1, k1F1B, 1, 2, false, true}});
}

RANK_TEST(LayoutEvalN8, DataTensorPipeline) {
  run_cases({{{2, 2, 2}, 3, kInterleaved, 2, 2, true, true}});
}

}  // namespace
}  // namespace tessera::parallel
