// Harness case for the fused AdamW step (a few steps on clones against a plain f64 loop), and
// unit tests of its semantics and input checks. squared_norm's case is with the reductions.

#include <gtest/gtest.h>

#include <cmath>

#include "ops/harness.h"

namespace tessera::testing {
namespace {

// The hyperparameters of one trial, carried as an f64 tensor.
struct Hyper {
  AdamWArgs args;
  int steps = 1;
};

Tensor hyper_tensor(const Hyper& h) {
  const AdamWArgs& a = h.args;
  return from_vector<double>({a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, double(a.step),
                              a.grad_scale, double(h.steps)},
                             Shape{8});
}

Hyper hyper_of(const Tensor& t) {
  std::vector<double> v = to_vector<double>(t);
  Hyper h;
  h.args = {float(v[0]), float(v[1]),   float(v[2]), float(v[3]),
            float(v[4]), int64_t(v[5]), float(v[6])};
  h.steps = int(v[7]);
  return h;
}

// param, m, v after `steps` updates from the same gradient, flattened and concatenated.
Tensor reference_steps(const std::vector<Tensor>& in) {
  HostTensor p(in[0]), g(in[1]), m(in[2]), v(in[3]);
  Hyper h = hyper_of(in[4]);
  // The kernel's f32 coefficients, widened: the reference then differs only by rounding.
  const AdamWArgs& a = h.args;
  double lr = a.lr, b1 = a.beta1, b2 = a.beta2, eps = a.eps, wd = a.weight_decay;
  for (int s = 0; s < h.steps; ++s) {
    double t = double(a.step + s);
    double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
    for (size_t i = 0; i < p.v.size(); ++i) {
      double gi = g.v[i] * double(a.grad_scale);
      p.v[i] -= lr * wd * p.v[i];
      m.v[i] = b1 * m.v[i] + (1 - b1) * gi;
      v.v[i] = b2 * v.v[i] + (1 - b2) * gi * gi;
      p.v[i] -= lr * (m.v[i] / bc1) / (std::sqrt(v.v[i] / bc2) + eps);
    }
  }
  std::vector<double> all = p.v;
  all.insert(all.end(), m.v.begin(), m.v.end());
  all.insert(all.end(), v.v.begin(), v.v.end());
  return from_vector<double>(all, Shape{int64_t(all.size())});
}

}  // namespace

TESSERA_OP_CASE(adamw) {
  OpCase c;
  c.name = "adamw";
  // param, m and v are f32 by contract; the 16-bit paths (bf16/f16 gradients, the rounded
  // copy) are tests/cuda/adamw_kernels_test.cpp's cases.
  c.bf16_inputs = false;
  c.make_inputs = [](CaseRng& rng, DType dt) {
    Shape s = rng.shape(int(rng.size(0, 3)), 1, 9);
    Hyper h;
    const float lrs[] = {1e-3f, 3e-2f, 0.1f};
    h.args.lr = lrs[rng.size(0, 2)];
    h.args.beta1 = rng.coin() ? 0.9f : 0.8f;
    h.args.beta2 = rng.coin() ? 0.999f : 0.95f;
    h.args.eps = rng.coin() ? 1e-8f : 1e-3f;
    h.args.weight_decay = rng.coin() ? 0.0f : 0.1f;
    h.args.step = rng.size(1, 1000);
    h.args.grad_scale = rng.coin() ? 1.0f : 0.25f;
    h.steps = int(rng.size(1, 4));
    // Mid-training state: any m, a nonnegative v.
    return std::vector<Tensor>{rng.tensor(s, dt), rng.tensor(s, dt), rng.tensor(s, dt, 0.1),
                               rng.uniform(s, dt, 0.0, 0.05), hyper_tensor(h)};
  };
  // Works on contiguous clones (the step is in place and needs dense f32 buffers).
  c.run = [](const std::vector<Tensor>& in) {
    Tensor p = ops::clone(in[0]), g = ops::clone(in[1]), m = ops::clone(in[2]),
           v = ops::clone(in[3]);
    Hyper h = hyper_of(in[4]);
    for (int s = 0; s < h.steps; ++s) {
      AdamWArgs a = h.args;
      a.step += s;
      ops::adamw_step_(p, g, m, v, a);
    }
    return ops::cat({ops::flatten(p), ops::flatten(m), ops::flatten(v)}, 0);
  };
  c.reference = reference_steps;
  // Each step rounds p, m and v a few times in f32 (2^-24 relative each); over <= 4 steps that
  // stays below 1e-6 relative. m can cancel towards 0, where its error is absolute: a few
  // ulp of |g| ~ 4, i.e. ~1e-6; 1e-5 leaves margin.
  c.rtol = 1e-5;
  c.atol = 1e-5;
  return c;
}

namespace {

struct State {
  Tensor p, g, m, v;
};

State random_state(int64_t n, uint64_t seed) {
  Generator gen(seed);
  return {randn({n}, gen), randn({n}, gen), mul(randn({n}, gen), 0.1),
          rand({n}, gen, DType::f32, Device::cpu(), 0.0, 0.05)};
}

TEST(AdamW, FirstStepMovesEachWeightByAboutLr) {
  // At step 1 with zero moments, m_hat = g and sqrt(v_hat) = |g|: the update is lr * sign(g).
  Generator gen(1);
  Tensor p = zeros({1000}), g = randn({1000}, gen), m = zeros({1000}), v = zeros({1000});
  AdamWArgs a;
  a.lr = 0.01f;
  ops::adamw_step_(p, g, m, v, a);
  std::vector<float> pv = to_vector<float>(p), gv = to_vector<float>(g);
  for (size_t i = 0; i < pv.size(); ++i) {
    // eps / |g| is below 1e-5 for all but the tiniest gradients; f32 rounding adds ~1e-9.
    double expect = -0.01 * (gv[i] > 0 ? 1 : -1) * std::abs(gv[i]) / (std::abs(gv[i]) + 1e-8);
    EXPECT_NEAR(pv[i], expect, 1e-8) << i;
  }
}

TEST(AdamW, WeightDecayIsDecoupled) {
  // A zero gradient with zero moments leaves only the decay: p * (1 - lr * wd).
  Tensor p = full({10}, 2.0), g = zeros({10}), m = zeros({10}), v = zeros({10});
  AdamWArgs a;
  a.lr = 0.1f;
  a.weight_decay = 0.5f;
  ops::adamw_step_(p, g, m, v, a);
  for (float x : to_vector<float>(p)) EXPECT_FLOAT_EQ(x, 2.0f * (1.0f - 0.05f));
  for (float x : to_vector<float>(m)) EXPECT_EQ(x, 0.0f);
}

TEST(AdamW, GradScaleEqualsPrescaledGradient) {
  // grad * scale is one f32 multiply either way, so the results match bit for bit.
  State s1 = random_state(5000, 3), s2 = random_state(5000, 3);
  AdamWArgs a;
  a.step = 7;
  a.weight_decay = 0.1f;
  a.grad_scale = 0.125f;
  ops::adamw_step_(s1.p, s1.g, s1.m, s1.v, a);
  a.grad_scale = 1.0f;
  ops::adamw_step_(s2.p, ops::mul(s2.g, 0.125), s2.m, s2.v, a);
  EXPECT_TRUE(equal(s1.p, s2.p));
  EXPECT_TRUE(equal(s1.m, s2.m));
  EXPECT_TRUE(equal(s1.v, s2.v));
}

TEST(AdamW, ViewsIntoAFlatBufferUpdateOnlyTheirRange) {
  Tensor flat_p = zeros({100}), flat_g = ones({100}), flat_m = zeros({100}), flat_v = zeros({100});
  auto part = [](const Tensor& t) { return ops::narrow(t, 0, 30, 40); };
  ops::adamw_step_(part(flat_p), part(flat_g), part(flat_m), part(flat_v), AdamWArgs{});
  std::vector<float> p = to_vector<float>(flat_p);
  for (int i = 0; i < 100; ++i) {
    if (i >= 30 && i < 70) {
      EXPECT_NEAR(p[size_t(i)], -1e-3, 1e-9);  // lr * g / (|g| + eps)
    } else {
      EXPECT_EQ(p[size_t(i)], 0.0f);
    }
  }
}

TEST(AdamW, BumpsVersionsOfWhatItWrites) {
  State s = random_state(10, 4);
  uint64_t pv = s.p.storage()->version(), gv = s.g.storage()->version();
  ops::adamw_step_(s.p, s.g, s.m, s.v, AdamWArgs{});
  EXPECT_GT(s.p.storage()->version(), pv);
  EXPECT_GT(s.m.storage()->version(), 0u);
  EXPECT_GT(s.v.storage()->version(), 0u);
  EXPECT_EQ(s.g.storage()->version(), gv);
}

void expect_adamw_error(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                        const AdamWArgs& a, const std::string& needle) {
  try {
    ops::adamw_step_(p, g, m, v, a);
    ADD_FAILURE() << "expected an error mentioning " << needle;
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("adamw"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
}

TEST(AdamW, RejectsBadInputsWithClearErrors) {
  State s = random_state(12, 5);
  AdamWArgs a;
  expect_adamw_error(s.p, zeros({13}), s.m, s.v, a, "grad must have shape [12], got f32[13]");
  expect_adamw_error(s.p, s.g, ops::cast(s.m, DType::bf16), s.v, a, "m must be f32, got bf16[12]");
  Tensor p2 = zeros({3, 4}), strided = ops::transpose(zeros({4, 3}), 0, 1);
  expect_adamw_error(p2, strided, zeros({3, 4}), zeros({3, 4}), a,
                     "grad (f32[3, 4] on cpu) must be contiguous");
  expect_adamw_error(s.p, s.g, s.m, s.m, a, "m (f32[12] on cpu) and v (f32[12] on cpu) overlap");
  AdamWArgs bad_step;
  bad_step.step = 0;
  expect_adamw_error(s.p, s.g, s.m, s.v, bad_step, "step must be at least 1");
  AdamWArgs bad_beta;
  bad_beta.beta2 = 1.0f;
  expect_adamw_error(s.p, s.g, s.m, s.v, bad_beta, "betas must be in [0, 1)");
  expect_adamw_error(s.p, Tensor(), s.m, s.v, a, "grad is an undefined tensor");
}

}  // namespace
}  // namespace tessera::testing
