// Layout equivalence: ten training steps of a tiny GPT under ParallelTrainer, for every layout
// of dp2, tp2, pp2, dp2.tp2, dp2.pp2, tp2.pp2 and dp2.tp2.pp2 (ZeRO 0-3 wherever dp > 1, GPipe,
// 1F1B and interleaved schedules under pp, sequence parallelism on and off under tp), against
// one process on the same global batches: the per-step losses and the gathered final weights.
//
// Tolerance, 1e-5 relative (per-step loss; per-tensor ||w - w_ref|| / ||w_ref||): the layouts
// compute the same sums in other groupings (dp's reduce-scatter average of per-rank partial
// batch sums, tp's row-parallel all-reduce and vocab-parallel loss, pp's per-stage partial
// norms, micro-batches accumulated one after another), each regrouping about 1e-7 relative in
// f32. AdamW divides m by sqrt(v), which keeps an update's relative error near its gradient's,
// and ten steps add ten such errors: the measured worst is printed per run (losses <= 1.2e-7,
// weights <= 2.8e-6, under tp2; see layout_config for why the run's learning rate matters).
//
// The attention key bias (GPT-2 layouts only; the Llama-style model has no biases) has a
// gradient that is zero in exact arithmetic (it shifts every score of a softmax row alike),
// so it holds rounding noise that depends on the summation order, and AdamW turns noise into
// steps of up to lr. It is checked against |b_k| <= 2 * lr * steps (AdamW moves a weight by at
// most about lr per step; 2x margin) and left out of the relative comparison.

#include <algorithm>

#include "nn/tiny_models.h"
#include "parallel/layout_test_util.h"
#include "parallel/rank_test.h"

namespace tessera::parallel {
namespace {

using testing::layout_config;
using testing::layout_gpt2;
using testing::layout_llama;
using testing::LayoutRun;

constexpr double kRelTol = 1e-5;  // see the file comment

// Zeroes the key bias (after checking its bound) in a copy of the weights.
nn::StateDict without_key_bias(const nn::StateDict& weights, const nn::GPTConfig& model,
                               double bound, const std::string& what) {
  nn::StateDict out;
  const int64_t C = model.n_embd, kv = model.n_kv_head * model.head_dim();
  for (const auto& [name, t] : weights) {
    Tensor copy = ops::clone(t);
    if (name.find("attn.c_attn.bias") != std::string::npos) {
      Tensor key = ops::narrow(copy, 0, C, kv);
      for (float v : to_vector<float>(key)) EXPECT_LE(std::abs(v), bound) << what << " " << name;
      ops::zero_(key);
    }
    out.emplace_back(name, copy);
  }
  return out;
}

void expect_matches(const LayoutRun& got, const LayoutRun& ref, const nn::GPTConfig& model,
                    const ParallelConfig& p, const std::string& what) {
  ASSERT_EQ(got.losses.size(), ref.losses.size()) << what;
  double worst_loss = 0;
  for (size_t i = 0; i < got.losses.size(); ++i)
    worst_loss = std::max(worst_loss, std::abs(got.losses[i] - ref.losses[i]) / ref.losses[i]);
  EXPECT_LE(worst_loss, kRelTol) << what << ": per-step losses";

  const double bound = 2.0 * p.lr_schedule.max_lr * double(ref.losses.size());
  const nn::StateDict a = without_key_bias(got.weights, model, bound, what);
  const nn::StateDict b = without_key_bias(ref.weights, model, bound, what + " (reference)");
  ASSERT_EQ(a.size(), b.size()) << what;
  double worst_weight = 0;
  std::string worst_name;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first) << what;
    ASSERT_EQ(a[i].second.shape(), b[i].second.shape()) << what << " " << a[i].first;
    const double e = testing::relative_error(a[i].second, b[i].second);
    EXPECT_LE(e, kRelTol) << what << " " << a[i].first;
    if (e >= worst_weight) worst_name = a[i].first;
    worst_weight = std::max(worst_weight, e);
  }
  if (testing::test_world()->rank() == 0)
    std::printf("  %-48s loss %.1e  weights %.1e (%s)\n", what.c_str(), worst_loss, worst_weight,
                worst_name.c_str());
}

using Case = testing::LayoutCase;

void run_cases(const std::vector<Case>& cases) {
  nn::testing::OneThread one_thread;
  const nn::GPTConfig llama = layout_llama(), gpt2 = layout_gpt2();
  // The reference depends on the model only (every case shares the batch and optimizer).
  const ParallelConfig base = layout_config({});
  const LayoutRun ref_llama = testing::run_reference(llama, base);
  const LayoutRun ref_gpt2 = testing::run_reference(gpt2, base);
  // Clipping is active in some step, so the global norm is part of what must agree.
  EXPECT_GT(*std::max_element(ref_llama.norms.begin(), ref_llama.norms.end()), base.max_grad_norm);
  for (const Case& c : cases) {
    const ParallelConfig p = testing::case_config(c);
    const std::string what = std::string(c.gpt2 ? "gpt2 " : "llama ") + p.describe();
    const nn::GPTConfig& model = c.gpt2 ? gpt2 : llama;
    expect_matches(testing::run_layout(model, p), c.gpt2 ? ref_gpt2 : ref_llama, model, p, what);
  }
}

constexpr auto kGPipe = ScheduleKind::gpipe;
constexpr auto k1F1B = ScheduleKind::one_f_one_b;
constexpr auto kInterleaved = ScheduleKind::interleaved;

RANK_TEST(LayoutEquivalenceN2, DataParallelEveryZeroStage) {
  run_cases({{{2, 1, 1}, 0, k1F1B, 1, 1},
             {{2, 1, 1}, 1, k1F1B, 1, 2},
             {{2, 1, 1}, 2, k1F1B, 1, 2},
             {{2, 1, 1}, 3, k1F1B, 1, 1},
             {{2, 1, 1}, 3, k1F1B, 1, 2, false, true}});
}

RANK_TEST(LayoutEquivalenceN2, TensorParallelWithAndWithoutSequenceParallelism) {
  run_cases({{{1, 1, 2}, 0, k1F1B, 1, 1, false},
             {{1, 1, 2}, 0, k1F1B, 1, 2, true},
             {{1, 1, 2}, 0, k1F1B, 1, 1, true, true}});
}

RANK_TEST(LayoutEquivalenceN2, PipelineEverySchedule) {
  run_cases({{{1, 2, 1}, 0, kGPipe, 1, 2},
             {{1, 2, 1}, 0, k1F1B, 1, 4},
             {{1, 2, 1}, 0, kInterleaved, 2, 2},
             {{1, 2, 1}, 0, k1F1B, 1, 2, false, true},
             {{1, 2, 1}, 0, kInterleaved, 2, 4, false, true}});
}

RANK_TEST(LayoutEquivalenceN4, DataAndTensorParallel) {
  run_cases({{{2, 1, 2}, 0, k1F1B, 1, 1, false},
             {{2, 1, 2}, 1, k1F1B, 1, 2, true},
             {{2, 1, 2}, 2, k1F1B, 1, 1, true},
             {{2, 1, 2}, 3, k1F1B, 1, 2, false},
             {{2, 1, 2}, 3, k1F1B, 1, 1, true, true}});
}

RANK_TEST(LayoutEquivalenceN4, DataParallelPipeline) {
  run_cases({{{2, 2, 1}, 0, k1F1B, 1, 2},
             {{2, 2, 1}, 1, kInterleaved, 2, 2},
             {{2, 2, 1}, 2, kGPipe, 1, 2},
             {{2, 2, 1}, 3, k1F1B, 1, 2},
             {{2, 2, 1}, 3, kInterleaved, 2, 2, false, true}});
}

RANK_TEST(LayoutEquivalenceN4, TensorParallelPipeline) {
  run_cases({{{1, 2, 2}, 0, k1F1B, 1, 2, false},
             {{1, 2, 2}, 0, kInterleaved, 2, 2, true},
             {{1, 2, 2}, 0, kGPipe, 1, 4, true, true}});
}

RANK_TEST(LayoutEquivalenceN8, DataTensorPipeline) {
  run_cases({{{2, 2, 2}, 0, k1F1B, 1, 2, false},
             {{2, 2, 2}, 1, kInterleaved, 2, 2, true},
             {{2, 2, 2}, 2, kGPipe, 1, 2, true},
             {{2, 2, 2}, 3, k1F1B, 1, 2, false},
             {{2, 2, 2}, 3, kInterleaved, 2, 2, true, true}});
}

}  // namespace
}  // namespace tessera::parallel
