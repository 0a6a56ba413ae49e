// Layouts that do not fit give one clear line, on every rank, before any collective; and a
// state dict that does not fit the model is refused before anything is written.

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "nn/tiny_models.h"
#include "parallel/layout_test_util.h"
#include "parallel/rank_test.h"
#include "support/error_of.h"

namespace tessera::parallel {
namespace {

using testing::layout_config;
using testing::layout_gpt2;
using testing::layout_llama;

using tessera::testing::error_of;

// layout_error is a pure function of the config, the model and the world size.
RANK_TEST(LayoutErrorsN1, EachMisfitIsOneLineNamingTheSizes) {
  const nn::GPTConfig model = layout_llama();  // 4 layers, 4 heads, 2 kv heads
  auto why = [&](
                 MeshShape mesh, int world,
                 const std::function<void(ParallelConfig&)>& edit = [](ParallelConfig&) {}) {
    ParallelConfig p = layout_config(mesh);
    edit(p);
    return layout_error(p, model, world);
  };
  EXPECT_EQ(why({2, 2, 2}, 8), "");
  EXPECT_EQ(why({2, 2, 2}, 4), "dp*tp*pp = 2*2*2 = 8 does not match the 4 ranks");
  nn::GPTConfig six = model;
  six.n_head = 6;
  six.n_kv_head = 6;
  six.n_embd = 24;
  EXPECT_EQ(layout_error(layout_config({1, 1, 4}), six, 4), "n_head 6 is not divisible by tp 4");
  EXPECT_EQ(why({1, 1, 4}, 4), "n_kv_head 2 is not divisible by tp 4");
  EXPECT_EQ(why({1, 2, 1}, 2,
                [](ParallelConfig& p) {
                  p.schedule = ScheduleKind::gpipe;
                  p.virtual_stages = 4;
                }),
            "n_layer 4 is not divisible by pp*V = 2*4");
  EXPECT_EQ(why({2, 1, 1}, 2,
                [](ParallelConfig& p) {
                  p.batch_size = 6;
                  p.microbatches = 2;
                }),
            "global batch 6 not divisible by dp*M = 2*2 = 4");
  EXPECT_EQ(why({1, 1, 2}, 2,
                [](ParallelConfig& p) {
                  p.seq_len = 7;
                  p.sequence_parallel = true;
                }),
            "T = 7 not divisible by tp 2 with sequence parallelism");
  EXPECT_EQ(why({1, 1, 2}, 2, [](ParallelConfig& p) { p.seq_len = 7; }), "");
  EXPECT_EQ(why({2, 1, 1}, 2, [](ParallelConfig& p) { p.zero_stage = 4; }),
            "ZeRO stage must be 0, 1, 2 or 3, got 4");
  EXPECT_EQ(why({1, 1, 1}, 1, [](ParallelConfig& p) { p.virtual_stages = 2; }),
            "virtual stages V = 2 need a pipeline (pp > 1); with pp = 1 use V = 1");
  EXPECT_NE(why({1, 2, 1}, 2,
                [](ParallelConfig& p) {
                  p.schedule = ScheduleKind::interleaved;
                  p.virtual_stages = 2;
                  p.microbatches = 1;
                })
                .find("m = 1 is not a multiple of 2"),
            std::string::npos);
  EXPECT_EQ(why({1, 1, 1}, 1, [](ParallelConfig& p) { p.seq_len = 17; }),
            "sequence length T = 17 must be in [1, block_size = 16]");
}

// The trainer throws the same line on every rank, before building anything.
RANK_TEST(LayoutErrorsN2, TrainerRefusesAMeshThatDoesNotFitTheRanks) {
  const std::string e = error_of([] {
    ParallelTrainer t(testing::test_world(), layout_llama(), layout_config({2, 2, 1}));
  });
  EXPECT_EQ(e, "parallel layout: dp*tp*pp = 2*1*2 = 4 does not match the 2 ranks");
}

RANK_TEST(LayoutErrorsN2, StepAndLoadRefuseWhatDoesNotFit) {
  nn::testing::OneThread one_thread;
  const nn::GPTConfig model = layout_llama();
  ParallelTrainer t(testing::test_world(), model, layout_config({1, 2, 1}));
  EXPECT_NE(error_of([&] {
              t.step(zeros({4, 8}, DType::i64), zeros({4, 8}, DType::i64));
            }).find("inputs and targets must be integer [8, 8]"),
            std::string::npos);
  nn::StateDict full = t.gather_full_state();
  nn::StateDict missing(full.begin() + 1, full.end());
  EXPECT_EQ(error_of([&] { t.load_full_state(missing); }),
            "load_full_state: the state dict has no 'wte.weight' (" +
                std::to_string(full.size() - 1) + " tensors given, the model has " +
                std::to_string(full.size()) + ")");
  nn::StateDict extra = full;
  extra.emplace_back("h.9.attn.c_attn.weight", zeros({2}));
  EXPECT_EQ(error_of([&] { t.load_full_state(extra); }),
            "load_full_state: 'h.9.attn.c_attn.weight' is not a parameter of this model");
  nn::StateDict wrong = full;
  wrong[0].second = zeros({3, 3});
  EXPECT_NE(error_of([&] { t.load_full_state(wrong); }).find("'wte.weight' is f32[3, 3]"),
            std::string::npos);
}

// A state dict saved under one layout loads under another and gives back the same tensors.
RANK_TEST(LayoutErrorsN2, FullStateRoundTripsAcrossLayouts) {
  nn::testing::OneThread one_thread;
  const nn::GPTConfig model = layout_gpt2();
  nn::GPT single(model);
  // The init plus a different constant per tensor: not what any layout starts from.
  nn::StateDict want;
  double k = 0;
  for (const auto& [name, p] : single.state_dict())
    want.emplace_back(name, ops::add(p, 0.01 * ++k));
  for (MeshShape mesh : {MeshShape{1, 1, 2}, MeshShape{1, 2, 1}, MeshShape{2, 1, 1}}) {
    ParallelConfig p = layout_config(mesh);
    p.zero_stage = mesh.size("dp") > 1 ? 3 : 0;
    ParallelTrainer t(testing::test_world(), model, p);
    t.load_full_state(want);
    nn::StateDict got = t.gather_full_state();
    ASSERT_EQ(got.size(), want.size()) << mesh.to_string();
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].first, want[i].first) << mesh.to_string();
      EXPECT_TRUE(equal(got[i].second, want[i].second)) << mesh.to_string() << " " << got[i].first;
    }
  }
}

}  // namespace
}  // namespace tessera::parallel
