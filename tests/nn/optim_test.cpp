// Optimizers against plain-loop references, weight-decay groups, optimizer state round trips
// and hostile state, and LR schedules at their key steps.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>

#include <nlohmann/json.hpp>

#include "nn/tiny_models.h"

namespace tessera::nn {
namespace {

// A leaf parameter with given values and gradient.
Tensor leaf(const std::vector<float>& v, const Shape& s, const std::vector<float>& g) {
  Tensor p = from_vector<float>(v, s).set_requires_grad(true);
  p.set_grad(from_vector<float>(g, s));
  return p;
}

// torch.optim.AdamW's update in double, one parameter.
struct AdamRef {
  std::vector<double> p, m, v;
  void step(const std::vector<float>& g, double lr, double b1, double b2, double eps, double wd,
            int t, double scale) {
    for (size_t i = 0; i < p.size(); ++i) {
      const double gi = g[i] * scale;
      p[i] *= 1 - lr * wd;
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      const double mhat = m[i] / (1 - std::pow(b1, t)), vhat = v[i] / (1 - std::pow(b2, t));
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};

TEST(AdamW, MatchesThePlainLoopWithDecayOnlyOnMatrices) {
  const std::vector<float> w0{0.5f, -1.0f, 2.0f, 0.25f, -0.75f, 1.5f}, b0{0.1f, -0.2f, 0.3f};
  Tensor w = leaf(w0, Shape{2, 3}, std::vector<float>(6, 0.0f));
  Tensor b = leaf(b0, Shape{3}, std::vector<float>(3, 0.0f));
  AdamWOptions o;
  o.lr = 0.05;
  o.beta1 = 0.8;
  o.beta2 = 0.9;
  o.eps = 1e-6;
  o.weight_decay = 0.1;
  AdamW opt(StateDict{{"w", w}, {"b", b}}, o);
  ASSERT_EQ(opt.groups().size(), 2u);
  EXPECT_EQ(opt.groups()[0].name, "decay");
  EXPECT_EQ(opt.groups()[1].name, "no_decay");
  AdamRef rw{{w0.begin(), w0.end()}, std::vector<double>(6), std::vector<double>(6)};
  AdamRef rb{{b0.begin(), b0.end()}, std::vector<double>(3), std::vector<double>(3)};
  const std::vector<std::vector<float>> gw{
      {1, -2, 0.5, 0, 3, -1}, {0.2f, 0.1f, -4, 1, 1, 1}, {-1, 1, -1, 1, -1, 1}};
  const std::vector<std::vector<float>> gb{{0.5, -0.5, 2}, {1, 1, 1}, {-3, 0, 0.25}};
  for (int t = 1; t <= 3; ++t) {
    w.set_grad(from_vector<float>(gw[size_t(t - 1)], Shape{2, 3}));
    b.set_grad(from_vector<float>(gb[size_t(t - 1)], Shape{3}));
    opt.step(0.5);
    rw.step(gw[size_t(t - 1)], 0.05, 0.8, 0.9, 1e-6, 0.1, t, 0.5);
    rb.step(gb[size_t(t - 1)], 0.05, 0.8, 0.9, 1e-6, 0.0, t, 0.5);
  }
  // f32 arithmetic over three steps of O(1) values: ~1e-6 relative.
  std::vector<float> pw = to_vector<float>(w), pb = to_vector<float>(b);
  for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(pw[i], rw.p[i], 2e-6) << i;
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(pb[i], rb.p[i], 2e-6) << i;
  EXPECT_EQ(opt.step_count(), 3);
}

// With zero gradients only weight decay moves a parameter: matrices shrink by (1 - lr * wd)
// per step, vectors stay exactly where they are.
TEST(AdamW, NoWeightDecayOnBiasesNormsOrVectors) {
  GPT m(testing::tiny_gpt2());
  AdamWOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.5;
  AdamW opt(m.named_parameters(), o);
  std::vector<std::vector<float>> before;
  for (const auto& [n, p] : m.named_parameters()) {
    before.push_back(to_vector<float>(p));
    p.set_grad(zeros_like(p));
  }
  opt.step();
  size_t i = 0;
  for (const auto& [n, p] : m.named_parameters()) {
    std::vector<float> now = to_vector<float>(p);
    const bool vector = p.dim() < 2;
    EXPECT_EQ(vector, n.find(".bias") != std::string::npos || n.find("ln_") != std::string::npos)
        << n;
    for (size_t j = 0; j < now.size(); ++j) {
      if (vector)
        ASSERT_EQ(now[j], before[i][j]) << n;
      else
        ASSERT_FLOAT_EQ(now[j], before[i][j] * 0.95f) << n;
    }
    ++i;
  }
}

TEST(SGD, MomentumMatchesThePlainLoop) {
  const std::vector<float> w0{1.0f, -2.0f, 0.5f, 3.0f};
  Tensor w = leaf(w0, Shape{2, 2}, std::vector<float>(4, 0.0f));
  SGDOptions o;
  o.lr = 0.1;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  SGD opt(StateDict{{"w", w}}, o);
  std::vector<double> p(w0.begin(), w0.end()), buf(4, 0.0);
  const std::vector<std::vector<float>> grads{{1, 2, 3, 4}, {-1, 0, 1, 0}, {0.5f, 0.5f, -2, 1}};
  for (const auto& g : grads) {
    w.set_grad(from_vector<float>(g, Shape{2, 2}));
    opt.step(2.0);
    for (size_t i = 0; i < 4; ++i) {
      const double d = 2.0 * g[i] + 0.01 * p[i];
      buf[i] = 0.9 * buf[i] + d;
      p[i] -= 0.1 * buf[i];
    }
  }
  std::vector<float> got = to_vector<float>(w);
  // f32 round-off over three steps of O(1) values.
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got[i], p[i], 2e-6) << i;
}

TEST(Optimizer, GroupsAndParametersAreValidated) {
  Tensor w = leaf({1, 2}, Shape{2}, {0, 0});
  EXPECT_THROW(AdamW(StateDict{{"w", w}, {"w2", w}}, AdamWOptions{}), Error);
  EXPECT_THROW(AdamW(StateDict{{"x", from_vector<float>({1}, Shape{1})}}, AdamWOptions{}), Error);
  AdamWOptions bad;
  bad.beta2 = 1.0;
  EXPECT_THROW(AdamW(StateDict{{"w", w}}, bad), Error);
  EXPECT_THROW(SGD(StateDict{{"w", w}}, SGDOptions{-1.0, 0.0, 0.0}), Error);
  AdamW opt(StateDict{{"w", w}}, AdamWOptions{});
  EXPECT_THROW(opt.set_lr(NAN), Error);
  // A parameter without a gradient is skipped.
  Tensor idle = leaf({3}, Shape{1}, {0});
  idle.set_grad(Tensor());
  AdamW opt2(StateDict{{"idle", idle}}, AdamWOptions{});
  opt2.step();
  EXPECT_EQ(to_vector<float>(idle), std::vector<float>{3.0f});
}

// Saving after two steps and loading into a fresh optimizer over a copy of the model gives
// the same third step, bit for bit.
TEST(Optimizer, StateDictRoundTripResumesExactly) {
  GPTConfig c = testing::tiny_gpt2();
  GPT a(c), b(c);
  AdamWOptions o;
  o.lr = 3e-3;
  o.weight_decay = 0.1;
  AdamW oa(a.named_parameters(), o);
  Tensor idx = testing::token_batch(2, 8, 23, 51), targets = testing::token_batch(2, 8, 23, 52);
  for (int s = 0; s < 2; ++s) {
    oa.zero_grad();
    a.loss(idx, targets).backward();
    oa.step();
  }
  oa.set_lr(1e-3);
  OptimizerState st = oa.state_dict();
  EXPECT_EQ(st.scalars["step"], 2);
  EXPECT_NE(find_tensor(st.tensors, "h.0.attn.c_attn.weight.exp_avg_sq").defined(), false);
  b.load_state_dict(a.state_dict());
  AdamWOptions other = o;
  other.beta1 = 0.5;
  AdamW ob(b.named_parameters(), other);
  // The checkpoint's tensors round-trip through a serialisation as copies.
  OptimizerState copy{{}, nlohmann::json::parse(st.scalars.dump())};
  for (const auto& [n, t] : st.tensors) copy.tensors.emplace_back(n, ops::clone(t));
  ob.load_state_dict(copy);
  EXPECT_EQ(ob.step_count(), 2);
  EXPECT_EQ(ob.lr(), 1e-3);
  EXPECT_EQ(ob.options().beta1, 0.9);
  for (auto* opt : {&oa, &ob}) opt->zero_grad();
  a.loss(idx, targets).backward();
  b.loss(idx, targets).backward();
  oa.step();
  ob.step();
  std::vector<Tensor> pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(to_vector<float>(pa[i]), to_vector<float>(pb[i]));
}

// Every hostile state is rejected with a message naming the field, and nothing is changed.
TEST(Optimizer, HostileStateIsRejectedWithoutChanges) {
  GPT m(testing::tiny_gpt2());
  AdamW opt(m.named_parameters(), AdamWOptions{});
  const OptimizerState good = opt.state_dict();
  auto expect_rejected = [&](const std::function<void(OptimizerState&)>& edit,
                             const std::string& fragment) {
    OptimizerState s{{}, good.scalars};
    for (const auto& [n, t] : good.tensors) s.tensors.emplace_back(n, full_like(t, 7.0));
    edit(s);
    try {
      opt.load_state_dict(s);
      ADD_FAILURE() << "accepted: " << fragment;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
    EXPECT_EQ(opt.step_count(), 0);
    EXPECT_EQ(ops::sum(ops::mul(good.tensors[0].second, good.tensors[0].second)).item<float>(), 0);
  };
  expect_rejected([](OptimizerState& s) { s.scalars["kind"] = "sgd"; }, "'kind'");
  expect_rejected([](OptimizerState& s) { s.scalars["step"] = -3; }, "'step'");
  expect_rejected([](OptimizerState& s) { s.scalars["step"] = "two"; }, "'step'");
  expect_rejected([](OptimizerState& s) { s.scalars.erase("lr"); }, "'lr'");
  expect_rejected([](OptimizerState& s) { s.scalars["lr"] = -1.0; }, "'lr'");
  expect_rejected([](OptimizerState& s) { s.scalars["groups"][0]["name"] = "x"; }, "group 0");
  expect_rejected([](OptimizerState& s) { s.scalars["groups"][1]["params"][0] = "x"; }, "no_decay");
  expect_rejected([](OptimizerState& s) { s.scalars["groups"] = nlohmann::json::array(); },
                  "'groups'");
  expect_rejected([](OptimizerState& s) { s.scalars["hyperparameters"]["beta1"] = 1.5; }, "betas");
  expect_rejected([](OptimizerState& s) { s.scalars["hyperparameters"].erase("eps"); }, "'eps'");
  expect_rejected([](OptimizerState& s) { s.tensors.pop_back(); }, "missing tensor");
  expect_rejected([](OptimizerState& s) { s.tensors[0].second = zeros(Shape{3}); },
                  good.tensors[0].first);
  expect_rejected([](OptimizerState& s) { s.tensors.emplace_back("extra", zeros(Shape{1})); },
                  "unexpected tensor 'extra'");
  expect_rejected([](OptimizerState& s) { s.scalars = nlohmann::json::array(); }, "JSON object");
}

TEST(LRSchedule, ValuesAtKeySteps) {
  LRSchedule cos{ScheduleKind::cosine, 1.0, 0.1, 10, 110, 0.2};
  EXPECT_DOUBLE_EQ(cos.lr(0), 0.1);  // warmup: (step + 1) / warmup
  EXPECT_DOUBLE_EQ(cos.lr(4), 0.5);
  EXPECT_DOUBLE_EQ(cos.lr(9), 1.0);
  EXPECT_DOUBLE_EQ(cos.lr(10), 1.0);     // cosine starts at the top
  EXPECT_NEAR(cos.lr(60), 0.55, 1e-12);  // halfway: the midpoint of max and min
  EXPECT_NEAR(cos.lr(85), 0.1 + 0.45 * (1 + std::cos(std::numbers::pi * 0.75)), 1e-12);
  EXPECT_DOUBLE_EQ(cos.lr(110), 0.1);
  EXPECT_DOUBLE_EQ(cos.lr(5000), 0.1);

  LRSchedule wsd{ScheduleKind::wsd, 2.0, 0.0, 5, 100, 0.2};
  EXPECT_EQ(wsd.decay_start(), 80);
  EXPECT_DOUBLE_EQ(wsd.lr(2), 2.0 * 3 / 5);
  EXPECT_DOUBLE_EQ(wsd.lr(5), 2.0);
  EXPECT_DOUBLE_EQ(wsd.lr(79), 2.0);
  EXPECT_DOUBLE_EQ(wsd.lr(80), 2.0);
  EXPECT_DOUBLE_EQ(wsd.lr(90), 1.0);
  EXPECT_DOUBLE_EQ(wsd.lr(100), 0.0);

  LRSchedule flat{ScheduleKind::constant, 0.5, 0.0, 2, 0, 0.2};
  EXPECT_DOUBLE_EQ(flat.lr(0), 0.25);
  EXPECT_DOUBLE_EQ(flat.lr(1), 0.5);
  EXPECT_DOUBLE_EQ(flat.lr(1000000), 0.5);
  EXPECT_THROW(flat.lr(-1), Error);
}

TEST(LRSchedule, DecayStartNearInt64Max) {
  // From fuzz/train_config: wsd over 2^63 - 1 steps; double(total_steps) rounds up to 2^63, so
  // llround's result was unspecified and total_steps minus it overflowed.
  const int64_t huge = std::numeric_limits<int64_t>::max();
  LRSchedule all{ScheduleKind::wsd, 1.0, 0.0, 0, huge, 1.0};
  EXPECT_EQ(all.decay_start(), 0);
  all.validate();
  EXPECT_DOUBLE_EQ(all.lr(0), 1.0);
  LRSchedule half{ScheduleKind::wsd, 1.0, 0.0, 0, huge, 0.5};
  EXPECT_EQ(half.decay_start(), huge - (int64_t(1) << 62));
  LRSchedule small{ScheduleKind::wsd, 1.0, 0.0, 0, 7, 0.5};
  EXPECT_EQ(small.decay_start(), 3);  // 3.5 rounds away from zero, as llround did
}

TEST(LRSchedule, JsonRoundTripAndBadConfigs) {
  LRSchedule s{ScheduleKind::wsd, 3e-4, 3e-5, 100, 1000, 0.1};
  LRSchedule back = LRSchedule::from_json(s.to_json());
  EXPECT_EQ(back.to_json(), s.to_json());
  auto bad = [](const char* text, const std::string& fragment) {
    try {
      LRSchedule::from_json(nlohmann::json::parse(text));
      ADD_FAILURE() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  bad(R"({"kind": "linear", "total_steps": 10})", "'kind'");
  bad(R"({"warmup": 10})", "unknown key 'warmup'");
  bad(R"({"max_lr": "big", "total_steps": 10})", "'max_lr'");
  bad(R"({"total_steps": 10.5})", "'total_steps'");
  bad(R"({"total_steps": 10, "warmup_steps": 10})", "total_steps > warmup_steps");
  bad(R"({"total_steps": 10, "min_lr": 1.0})", "min_lr");
  bad(R"({"kind": "wsd", "total_steps": 10, "decay_fraction": 0})", "decay_fraction");
  bad(R"({"kind": "wsd", "total_steps": 10, "warmup_steps": 5, "decay_fraction": 0.9})",
      "decay phase");
  bad(R"([1, 2])", "JSON object");
}

}  // namespace
}  // namespace tessera::nn
