// Resuming under another layout: three steps under layout A, the model and optimizer state
// gathered into the single-process format, loaded into a fresh trainer under layout B (or into
// one process's nn::GPT and nn::AdamW), three more steps. The six per-step losses and the final
// weights match an uninterrupted six-step run of one process. Also: the gathered optimizer
// state is nn::AdamW's own (names, order, shapes, scalars), and a malformed one is refused on
// every rank, naming what is wrong, with nothing changed.
//
// Tolerance, 1e-5 relative (per-step loss; per-tensor ||w - w_ref|| / ||w_ref||), as in
// layout_equivalence_test.cpp: each layout regroups the same sums (about 1e-7 relative in f32
// each) and six AdamW steps add up six such errors. A missing optimizer state is far outside
// it: fresh moments change each weight's first resumed update by up to about lr = 3e-3, on
// weights of about 0.02 (skipping the load fails the losses of steps 5 and 6 and the weights).
//
// The GPT-2-style cases leave the attention bias out of the comparison: its key part has a
// gradient that is zero in exact arithmetic, so it holds summation-order noise that AdamW
// amplifies (layout_equivalence_test.cpp bounds it separately).

#include <algorithm>
#include <optional>
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
constexpr int64_t kFirst = 3, kTotal = 6;

// A layout, or one process (nullopt).
struct Layout {
  std::optional<MeshShape> mesh;
  int zero = 0;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int v = 1, m = 1;
  bool sp = false;
};
const Layout kOneProcess{};

ParallelConfig config_of(const Layout& l) {
  ParallelConfig p = layout_config(l.mesh.value_or(MeshShape{}));
  p.zero_stage = l.zero;
  p.schedule = l.schedule;
  p.virtual_stages = l.v;
  p.microbatches = l.m;
  p.sequence_parallel = l.sp;
  return p;
}

std::string describe(const Layout& l) {
  return l.mesh ? config_of(l).describe() : std::string("one process");
}

// Training state between the two halves, in the single-process format.
struct Saved {
  nn::StateDict model;
  nn::OptimizerState optimizer;
};

// Steps [from, to) under `l`, starting from `in` (a fresh model when null); appends the
// losses and returns the state after the last step.
Saved train(const nn::GPTConfig& model, const Layout& l, const Saved* in, int64_t from, int64_t to,
            std::vector<double>* losses) {
  const ParallelConfig p = config_of(l);
  Saved out;
  if (!l.mesh) {
    nn::GPT gpt(model);
    nn::AdamWOptions o = p.adamw;
    o.lr = p.lr_schedule.lr(from);
    nn::AdamW opt(gpt.named_parameters(), o);
    if (in) {
      gpt.load_state_dict(in->model);
      opt.load_state_dict(in->optimizer);
    }
    for (int64_t step = from; step < to; ++step) {
      opt.set_lr(p.lr_schedule.lr(step));
      gpt.set_step(step);
      const Batch b = global_batch(step, p.batch_size, p.seq_len, model.vocab_size);
      Tensor loss = gpt.loss(b.inputs, b.targets);
      losses->push_back(loss.item<float>());
      loss.backward();
      nn::clip_and_step(opt, p.max_grad_norm);
      opt.zero_grad();
    }
    for (const auto& [name, t] : gpt.state_dict()) out.model.emplace_back(name, ops::clone(t));
    out.optimizer = opt.state_dict();
    for (auto& [name, t] : out.optimizer.tensors) t = ops::clone(t);
    return out;
  }
  ParallelTrainer trainer(testing::test_world(), model, p);
  if (in) {
    trainer.load_full_state(in->model);
    trainer.load_full_optimizer_state(in->optimizer);
    trainer.set_step(from);
  }
  for (int64_t step = from; step < to; ++step) {
    const Batch b = global_batch(step, p.batch_size, p.seq_len, model.vocab_size);
    losses->push_back(trainer.step(b.inputs, b.targets).loss);
  }
  out.model = trainer.gather_full_state();
  out.optimizer = trainer.gather_full_optimizer_state();
  return out;
}

void resume_across(const Layout& a, const Layout& b, bool gpt2) {
  nn::testing::OneThread one_thread;
  const nn::GPTConfig model = gpt2 ? layout_gpt2() : layout_llama();
  const std::string what = describe(a) + " -> " + describe(b);
  std::vector<double> ref_losses, losses;
  const Saved ref = train(model, kOneProcess, nullptr, 0, kTotal, &ref_losses);
  const Saved half = train(model, a, nullptr, 0, kFirst, &losses);
  const Saved end = train(model, b, &half, kFirst, kTotal, &losses);

  ASSERT_EQ(losses.size(), ref_losses.size()) << what;
  double worst_loss = 0, worst_weight = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    const double e = std::abs(losses[i] - ref_losses[i]) / ref_losses[i];
    EXPECT_LE(e, kRelTol) << what << ": loss of step " << i + 1;
    worst_loss = std::max(worst_loss, e);
  }
  ASSERT_EQ(end.model.size(), ref.model.size()) << what;
  for (size_t i = 0; i < end.model.size(); ++i) {
    ASSERT_EQ(end.model[i].first, ref.model[i].first) << what;
    if (gpt2 && end.model[i].first.find("attn.c_attn.bias") != std::string::npos) continue;
    const double e = testing::relative_error(end.model[i].second, ref.model[i].second);
    EXPECT_LE(e, kRelTol) << what << " " << end.model[i].first;
    worst_weight = std::max(worst_weight, e);
  }
  if (testing::test_world()->rank() == 0)
    std::printf("  %-72s loss %.1e  weights %.1e\n", what.c_str(), worst_loss, worst_weight);
}

constexpr auto k1F1B = ScheduleKind::one_f_one_b;
constexpr auto kInterleaved = ScheduleKind::interleaved;

RANK_TEST(LayoutResumeN2, DataParallelZero1ToTensorParallel) {
  resume_across({MeshShape{2, 1, 1}, 1, k1F1B, 1, 2}, {MeshShape{1, 1, 2}, 0, k1F1B, 1, 1, true},
                false);
}

RANK_TEST(LayoutResumeN2, TiedPipelineToZero3) {
  resume_across({MeshShape{1, 2, 1}, 0, kInterleaved, 2, 2}, {MeshShape{2, 1, 1}, 3, k1F1B, 1, 2},
                true);
}

RANK_TEST(LayoutResumeN2, TensorParallelToOneProcessAndBack) {
  resume_across({MeshShape{1, 1, 2}}, kOneProcess, false);
  resume_across(kOneProcess, {MeshShape{1, 1, 2}, 0, k1F1B, 1, 2, true}, true);
}

// The gathered state is what nn::AdamW over the single-process model holds: the same tensor
// names in the same order with the same shapes, and the same scalars but for the values.
RANK_TEST(LayoutResumeN2, GatheredStateIsTheSingleProcessFormat) {
  nn::testing::OneThread one_thread;
  const nn::GPTConfig model = layout_gpt2();
  std::vector<double> losses;
  const Saved one = train(model, kOneProcess, nullptr, 0, 1, &losses);
  const Saved two = train(model, {MeshShape{1, 2, 1}, 0, k1F1B, 1, 2}, nullptr, 0, 1, &losses);
  ASSERT_EQ(two.optimizer.tensors.size(), one.optimizer.tensors.size());
  for (size_t i = 0; i < one.optimizer.tensors.size(); ++i) {
    EXPECT_EQ(two.optimizer.tensors[i].first, one.optimizer.tensors[i].first);
    EXPECT_EQ(two.optimizer.tensors[i].second.shape(), one.optimizer.tensors[i].second.shape());
  }
  EXPECT_EQ(two.optimizer.scalars, one.optimizer.scalars);
}

// Every rank refuses a malformed state with the same message and keeps its own.
RANK_TEST(LayoutResumeN2, RefusesAMalformedState) {
  nn::testing::OneThread one_thread;
  const nn::GPTConfig model = layout_llama();
  ParallelTrainer trainer(testing::test_world(), model, config_of({MeshShape{1, 1, 2}}));
  const Batch b = global_batch(0, 8, 8, model.vocab_size);
  trainer.step(b.inputs, b.targets);
  const nn::OptimizerState good = trainer.gather_full_optimizer_state();
  const std::string victim = "h.1.mlp.c_proj.weight.exp_avg";

  auto expect_refused = [&](const nn::OptimizerState& bad, const std::string& want) {
    try {
      trainer.load_full_optimizer_state(bad);
      ADD_FAILURE() << "accepted a state that should fail with: " << want;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  nn::OptimizerState missing = good;
  std::erase_if(missing.tensors, [&](const auto& e) { return e.first == victim; });
  expect_refused(missing,
                 "optimizer state (exp_avg): the state dict has no 'h.1.mlp.c_proj.weight'");
  nn::OptimizerState reshaped = good;
  for (auto& [name, t] : reshaped.tensors)
    if (name == victim) t = zeros(Shape{3}, DType::f32);
  expect_refused(reshaped, "'h.1.mlp.c_proj.weight' is f32[3]");
  nn::OptimizerState extra = good;
  extra.tensors.emplace_back("h.1.mlp.c_proj.weight.momentum", zeros(Shape{3}, DType::f32));
  expect_refused(extra, "unexpected tensor 'h.1.mlp.c_proj.weight.momentum'");
  nn::OptimizerState step = good;
  step.scalars["step"] = -1;
  expect_refused(step, "'step' must be a non-negative integer");

  const nn::OptimizerState after = trainer.gather_full_optimizer_state();
  EXPECT_EQ(after.scalars, good.scalars);
  for (size_t i = 0; i < good.tensors.size(); ++i)
    EXPECT_EQ(to_vector<float>(after.tensors[i].second), to_vector<float>(good.tensors[i].second))
        << good.tensors[i].first;
}

RANK_TEST(LayoutResumeN4, TensorPipelineToDataParallelZero3) {
  resume_across({MeshShape{1, 2, 2}, 0, k1F1B, 1, 2}, {MeshShape{4, 1, 1}, 3, k1F1B, 1, 2}, true);
}

RANK_TEST(LayoutResumeN4, DataTensorToTiedInterleavedPipeline) {
  resume_across({MeshShape{2, 1, 2}, 2, k1F1B, 1, 1, true},
                {MeshShape{1, 2, 2}, 0, kInterleaved, 2, 2}, true);
}

RANK_TEST(LayoutResumeN8, OneProcessToDataTensorPipeline) {
  resume_across(kOneProcess, {MeshShape{2, 2, 2}, 3, k1F1B, 1, 2, true}, true);
}

}  // namespace
}  // namespace tessera::parallel
