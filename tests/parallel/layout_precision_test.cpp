// Mixed precision under parallel layouts (engine/parallel_precision.h):
//  - bf16 under dp2 (ZeRO-0 and ZeRO-3), tp2, pp2 (1F1B with and without a tied embedding, and
//    interleaved with two virtual stages), tp2.pp2, dp2.tp2 (ZeRO-1, sequence parallel) and
//    dp2.tp2.pp2 (ZeRO-2) tracks one process's nn::MixedPrecision bf16 run for ten steps
//    (per-step losses, gathered fp32 master weights);
//    the chunks the pipeline ran hold exactly round(master) in bf16 on every rank; and on the
//    first step, from the same weights, the layout's gradient norm matches one process's bf16
//    norm far more closely than bf16's differs from fp32's (bf16 is really used);
//  - fp16: an inf planted in ONE rank's gradient makes every rank skip the step (master weights
//    and optimizer state bit-identical, the scale halved everywhere), the scale grows again
//    after growth_interval clean steps, and the scaler's state round-trips through the
//    single-process checkpoint format.
//
// Tolerances, from bf16's unit roundoff u = 2^-9 ~ 1.95e-3 (8 significant bits). A layout
// rounds to bf16 where one process rounds differently: dp's and pp's per-rank and per-micro-
// batch weight gradients (each a GEMM output rounded once, then summed in fp32), and tp's
// row-parallel partial products (rounded, summed in fp32, rounded again). One such value then
// differs by up to ~u relative.
//  - First-step gradient norm, from the same weights (kNormTol = u / 16 ~ 1.2e-4 without tp,
//    u / 8 with it). Without tp the forward is the same bf16 computation row by row and only
//    the gradients' last roundings differ; they are independent per element, so the norm, a
//    root-sum-square over ~10^4 of them, moves far less than u (measured 1.4e-5 for dp2 and
//    pp2, 3.4e-5 with the tied GPT-2). tp adds a forward rounding per row-parallel output,
//    of the kind bf16 adds over fp32 everywhere (measured 1.5e-4). bf16 differs from fp32 by
//    the roundings of every weight and activation (measured 4.9e-4 Llama, 2.3e-4 GPT-2),
//    which must exceed the bound: this is the proof that bf16 is used, beside the check that
//    every chunk parameter the pipeline ran is round(master).
//  - Per-step losses over ten steps (kLossTol = u / 8 ~ 2.4e-4 relative). The loss is an fp32
//    mean over 64 token losses; perturbing each logit z by dz moves a token's loss by at most
//    2 max|dz| ~ 2u|z|, and this near-uniform model's logits stay well below 1 (loss ~ ln 61 =
//    4.1), so the mean moves by a small fraction of u (measured worst 8.7e-5, dp2.tp2.pp2).
//  - Master weights after ten steps (kWeightTol = 0.02, ||W - W_ref|| / ||W_ref|| over the
//    whole model). AdamW's first updates are ~lr * sign(g) whatever |g|, so an element whose
//    gradient is at the rounding level (a cancelling sum, a zero-init bias) moves by +-lr as
//    rounding decides, up to 2 * 10 * lr = 0.06 apart after ten steps; most elements'
//    gradients are far above that level (measured worst 4.4e-3, dp2.tp2.pp2).
//  Over ten steps bf16 and fp32 drift apart by the same sign noise (measured: losses 8.4e-5,
//  weights 4.6e-3), no more than two bf16 runs do, so the fp32 separation is asserted on the
//  first step, where both start from the same weights, and not on the trajectory.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>

#include "parallel/layout_test_util.h"
#include "parallel/rank_test.h"

namespace tessera::parallel {
namespace {

using testing::Batch;
using testing::global_batch;
using testing::layout_config;
using testing::layout_gpt2;
using testing::layout_llama;
using testing::LayoutRun;

constexpr double kUnitRoundoff = 1.0 / 512;       // bf16: 2^-9
constexpr double kNormTol = kUnitRoundoff / 16;   // first-step gradient norm, no tp
constexpr double kNormTolTp = kUnitRoundoff / 8;  // first-step gradient norm, with tp
constexpr double kLossTol = kUnitRoundoff / 8;    // per-step relative loss, ten steps
constexpr double kWeightTol = 0.02;               // whole-model relative master weights

using testing::run_single;

// Ten steps under the layout; then, on this rank, every parameter the pipeline ran is
// bf16 and bit for bit the rounding of its fp32 master.
LayoutRun run_layout_bf16(const nn::GPTConfig& model, const ParallelConfig& p,
                          const std::string& what) {
  ParallelTrainer trainer(testing::test_world(), model, p);
  LayoutRun r;
  for (int64_t step = 0; step < testing::kLayoutSteps; ++step) {
    Batch b = global_batch(step, p.batch_size, p.seq_len, model.vocab_size);
    ParallelStepStats s = trainer.step(b.inputs, b.targets);
    r.losses.push_back(s.loss);
    r.norms.push_back(s.grad_norm);
  }
  const ParallelPrecision& precision = trainer.precision();
  EXPECT_FALSE(precision.compute().empty()) << what;
  // ZeRO-3: the master is sharded, and so is the compute copy.
  trainer.data_parallel().gather_parameters();
  trainer.data_parallel().gather_compute_parameters();
  for (size_t i = 0; i < precision.compute().size(); ++i) {
    const auto& [name, c] = precision.compute()[i];
    const Tensor& m = precision.master()[i].second;
    EXPECT_EQ(c.dtype(), DType::bf16) << what << " " << name;
    EXPECT_EQ(to_vector<float>(ops::cast(c, DType::f32)),
              to_vector<float>(ops::cast(ops::cast(m, DType::bf16), DType::f32)))
        << what << " " << name << ": the compute parameter is not round(master)";
  }
  trainer.data_parallel().release_compute_parameters();
  trainer.data_parallel().release_parameters();
  r.weights = trainer.gather_full_state();
  return r;
}

double relative(double a, double b) {
  return std::abs(a - b) / std::abs(b);
}

// ||W - W_ref|| / ||W_ref|| over every tensor of the model.
double whole_model_error(const nn::StateDict& got, const nn::StateDict& ref) {
  EXPECT_EQ(got.size(), ref.size());
  double diff = 0, norm = 0;
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    EXPECT_EQ(got[i].first, ref[i].first);
    const std::vector<double> x = to_vector<double>(ops::cast(got[i].second, DType::f64));
    const std::vector<double> y = to_vector<double>(ops::cast(ref[i].second, DType::f64));
    for (size_t k = 0; k < std::min(x.size(), y.size()); ++k) {
      diff += (x[k] - y[k]) * (x[k] - y[k]);
      norm += y[k] * y[k];
    }
  }
  return std::sqrt(diff / norm);
}

using Case = testing::LayoutCase;

// bf16 under the case's layout against one process in bf16 (ten steps) and fp32 (one step).
void expect_tracks_single_process_bf16(const Case& c) {
  const nn::GPTConfig model = testing::case_model(c);
  ParallelConfig p = testing::case_config(c);
  p.precision = nn::Precision::bf16;
  const std::string what = str_cat(p.describe(), c.gpt2 ? " (GPT-2, tied)" : " (Llama)");

  const LayoutRun layout = run_layout_bf16(model, p, what);
  const LayoutRun bf16 = run_single(model, p);
  ParallelConfig fp32 = p;
  fp32.precision = nn::Precision::fp32;
  const LayoutRun reference = run_single(model, fp32, 1);
  ASSERT_EQ(layout.losses.size(), bf16.losses.size()) << what;

  const double norm_tol = c.mesh.size("tp") > 1 ? kNormTolTp : kNormTol;
  const double norm_error = relative(layout.norms[0], bf16.norms[0]);
  const double fp32_norm_error = relative(reference.norms[0], bf16.norms[0]);
  EXPECT_LE(norm_error, norm_tol) << what << ": first-step gradient norm";
  EXPECT_GT(fp32_norm_error, norm_tol) << what << ": fp32's norm is as close as the layout's";
  double loss_error = 0;
  for (size_t i = 0; i < layout.losses.size(); ++i) {
    const double e = relative(layout.losses[i], bf16.losses[i]);
    EXPECT_LE(e, kLossTol) << what << ": loss of step " << i;
    loss_error = std::max(loss_error, e);
  }
  const double weight_error = whole_model_error(layout.weights, bf16.weights);
  EXPECT_LE(weight_error, kWeightTol) << what << ": master weights after ten steps";
  if (testing::test_world()->rank() == 0)
    std::printf("  %-60s first norm %.1e (fp32 %.1e) | losses %.1e | weights %.1e\n", what.c_str(),
                norm_error, fp32_norm_error, loss_error, weight_error);
}

RANK_TEST(LayoutPrecisionN2, DataParallelBf16) {
  expect_tracks_single_process_bf16({.mesh = {2, 1, 1}, .zero = 0});
  expect_tracks_single_process_bf16({.mesh = {2, 1, 1}, .zero = 3});
}

RANK_TEST(LayoutPrecisionN2, TensorParallelBf16) {
  expect_tracks_single_process_bf16({.mesh = {1, 1, 2}});
}

RANK_TEST(LayoutPrecisionN2, PipelineBf16) {
  expect_tracks_single_process_bf16({.mesh = {1, 2, 1}, .m = 2});
  expect_tracks_single_process_bf16({.mesh = {1, 2, 1}, .m = 2, .gpt2 = true});
  expect_tracks_single_process_bf16(
      {.mesh = {1, 2, 1}, .schedule = ScheduleKind::interleaved, .v = 2, .m = 2});
}

RANK_TEST(LayoutPrecisionN4, TensorParallelPipelineBf16) {
  expect_tracks_single_process_bf16({.mesh = {1, 2, 2}, .m = 2});
}

RANK_TEST(LayoutPrecisionN4, DataTensorSequenceParallelBf16) {
  expect_tracks_single_process_bf16({.mesh = {2, 1, 2}, .zero = 1, .sp = true});
}

RANK_TEST(LayoutPrecisionN8, DataTensorPipelineBf16) {
  expect_tracks_single_process_bf16({.mesh = {2, 2, 2}, .zero = 2, .m = 2});
}

// fp16 with a small scale (so nothing overflows by itself) that grows after two clean steps.
ParallelConfig fp16_config(MeshShape mesh, int zero) {
  ParallelConfig p = layout_config(mesh);
  p.zero_stage = zero;
  p.microbatches = mesh.size("pp") > 1 ? 2 : 1;
  p.precision = nn::Precision::fp16;
  p.loss_scaler.init_scale = 1024;
  p.loss_scaler.growth_interval = 2;
  return p;
}

void expect_bitwise_equal(const nn::StateDict& a, const nn::StateDict& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first) << what;
    EXPECT_EQ(to_vector<float>(a[i].second), to_vector<float>(b[i].second))
        << what << ": " << a[i].first << " changed";
  }
}

nn::StateDict cloned(const nn::StateDict& d) {
  nn::StateDict out;
  for (const auto& [name, t] : d) out.emplace_back(name, ops::clone(t));
  return out;
}

// Runs one clean step, then one with an inf planted in the first parameter's gradient of
// `poisoned_rank` only (its forward and loss stay finite), then two clean steps.
void expect_overflow_skipped_everywhere(MeshShape mesh, int zero, int poisoned_rank) {
  const nn::GPTConfig model = layout_llama();
  const ParallelConfig p = fp16_config(mesh, zero);
  const std::string what = p.describe();
  ParallelTrainer trainer(testing::test_world(), model, p);
  const nn::DynamicLossScaler* scaler = trainer.precision().scaler();
  ASSERT_NE(scaler, nullptr);
  auto batch = [&](int64_t step) {
    return global_batch(step, p.batch_size, p.seq_len, model.vocab_size);
  };
  Batch b = batch(0);
  ParallelStepStats s = trainer.step(b.inputs, b.targets);
  ASSERT_TRUE(s.finite) << what << ": the first step overflowed by itself";
  EXPECT_EQ(s.loss_scale, 1024);

  const nn::StateDict weights = cloned(trainer.gather_full_state());
  const nn::OptimizerState optimizer = trainer.data_parallel().optimizer_state();
  const int64_t updates = trainer.data_parallel().step_count();
  if (testing::test_world()->rank() == poisoned_rank) {
    // AccumulateGrad adds the backward pass's gradient to this one: inf stays inf.
    const Tensor c = trainer.chunks().front()->named_parameters().front().second;
    c.set_grad(full(c.shape(), std::numeric_limits<double>::infinity(), c.dtype()));
  }
  b = batch(1);
  s = trainer.step(b.inputs, b.targets);
  EXPECT_FALSE(s.finite) << what << ": the planted inf did not reach this rank's norm";
  EXPECT_TRUE(std::isfinite(s.loss)) << what << ": the loss should stay finite";
  EXPECT_EQ(s.loss_scale, 1024) << what;
  EXPECT_EQ(scaler->scale(), 512) << what << ": the scale did not back off";
  EXPECT_EQ(scaler->skipped_steps(), 1) << what;
  expect_bitwise_equal(trainer.gather_full_state(), weights, what + " master weights");
  const nn::OptimizerState after = trainer.data_parallel().optimizer_state();
  EXPECT_EQ(trainer.data_parallel().step_count(), updates) << what;
  EXPECT_EQ(after.scalars, optimizer.scalars) << what;
  expect_bitwise_equal(after.tensors, optimizer.tensors, what + " optimizer state");

  for (int64_t step = 2; step < 4; ++step) {
    b = batch(step);
    s = trainer.step(b.inputs, b.targets);
    EXPECT_TRUE(s.finite) << what << ": step " << step;
    EXPECT_EQ(s.loss_scale, 512) << what << ": step " << step;
  }
  EXPECT_EQ(scaler->scale(), 1024) << what << ": the scale did not grow after 2 clean steps";
  EXPECT_EQ(scaler->skipped_steps(), 1) << what;
}

RANK_TEST(LayoutPrecisionN2, Fp16OverflowOnOneRankSkipsEveryRank) {
  expect_overflow_skipped_everywhere({2, 1, 1}, 0, 1);
  expect_overflow_skipped_everywhere({2, 1, 1}, 3, 0);
  expect_overflow_skipped_everywhere({1, 2, 1}, 0, 1);
}

RANK_TEST(LayoutPrecisionN4, Fp16OverflowOnOneRankSkipsEveryRank) {
  expect_overflow_skipped_everywhere({2, 1, 2}, 2, 3);
  expect_overflow_skipped_everywhere({1, 2, 2}, 0, 2);
}

// The loss scaler's state written by a layout resumes another layout and one process alike.
RANK_TEST(LayoutPrecisionN2, Fp16ScalerStateResumes) {
  const nn::GPTConfig model = layout_llama();
  const ParallelConfig p = fp16_config({2, 1, 1}, 1);
  ParallelTrainer first(testing::test_world(), model, p);
  for (int64_t step = 0; step < 3; ++step) {
    if (step == 1 && testing::test_world()->rank() == 0) {
      const Tensor c = first.chunks().front()->named_parameters().front().second;
      c.set_grad(full(c.shape(), std::numeric_limits<double>::infinity(), c.dtype()));
    }
    Batch b = global_batch(step, p.batch_size, p.seq_len, model.vocab_size);
    first.step(b.inputs, b.targets);
  }
  const nlohmann::json state = first.precision().state();
  ASSERT_EQ(state.at("precision"), "fp16");
  // One skip (1024 -> 512), then one clean step: not yet grown.
  EXPECT_EQ(first.precision().scaler()->scale(), 512);
  EXPECT_EQ(first.precision().scaler()->clean_steps(), 1);

  ParallelTrainer second(testing::test_world(), model, fp16_config({1, 1, 2}, 0));
  second.precision().load_state(state);
  EXPECT_EQ(second.precision().scaler()->state(), first.precision().scaler()->state());

  nn::GPT master(model), compute(model, DType::f16);
  nn::MixedPrecision single(nn::Precision::fp16, master.named_parameters(),
                            compute.named_parameters(), p.loss_scaler);
  single.load_state(state);
  EXPECT_EQ(single.scaler()->state(), first.precision().scaler()->state());

  // A bf16 layout ignores an fp16 scaler, as one process does.
  ParallelConfig bf16 = p;
  bf16.precision = nn::Precision::bf16;
  ParallelTrainer third(testing::test_world(), model, bf16);
  third.precision().load_state(state);
  EXPECT_EQ(third.precision().scaler(), nullptr);
  EXPECT_EQ(third.precision().loss_scale(), 1);
}

}  // namespace
}  // namespace tessera::parallel
