// Activation checkpointing: gradients are bitwise those of the plain run, for a segment that
// uses parameters from its closure and draws dropout masks, and the generators end where they
// would without the recompute.

#include <gtest/gtest.h>

#include "tessera/tessera.h"

namespace tessera {
namespace {

// Puts the calling thread's default generator back as the test found it.
class DefaultGeneratorGuard {
 public:
  DefaultGeneratorGuard()
      : seed_(default_generator().seed()), offset_(default_generator().offset()) {}
  ~DefaultGeneratorGuard() { default_generator().set_state(seed_, offset_); }

 private:
  uint64_t seed_, offset_;
};

constexpr int64_t kBatch = 5, kDim = 6, kHidden = 9;

struct Params {
  Tensor w1, b1, w2;

  static Params make() {
    Generator g(17);
    Params p{mul(randn({kDim, kHidden}, g), 0.4), randn({kHidden}, g),
             mul(randn({kHidden, kDim}, g), 0.3)};
    for (Tensor* t : {&p.w1, &p.b1, &p.w2}) t->set_requires_grad(true);
    return p;
  }
};

// x [B, D] @ w [D, H] from broadcasting and a sum, so the test needs only elementwise ops.
Tensor dense(const Tensor& x, const Tensor& w) {
  return sum(mul(unsqueeze(x, -1), w), {1});
}

// An MLP block with a residual; dropout draws from gen, or from the default generator.
Tensor block(const Tensor& x, const Params& p, Generator* gen) {
  Tensor h = tanh(add(dense(x, p.w1), p.b1));
  h = dropout(h, 0.25, gen ? *gen : default_generator());
  return add(x, dense(h, p.w2));
}

struct Outcome {
  Tensor loss, gx, gw1, gb1, gw2;
  uint64_t gen_offset_after;
};

// Forward, then `draws_between` extra draws (other layers' dropout), then backward.
Outcome run(bool checkpointed, bool own_generator, uint64_t draws_between) {
  Params p = Params::make();
  Generator data(3);
  Tensor x = randn({kBatch, kDim}, data);
  x.set_requires_grad(true);
  Generator gen(99, 1000);
  default_generator().set_state(7, 500);
  Generator* g = own_generator ? &gen : nullptr;
  Generator& used = own_generator ? gen : default_generator();

  Tensor y;
  if (checkpointed) {
    auto fn = [&p, g](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{block(in[0], p, g)};
    };
    y = autograd::checkpoint(
        fn, {x}, own_generator ? std::vector<Generator*>{&gen} : std::vector<Generator*>{})[0];
  } else {
    y = block(x, p, g);
  }
  used.advance(draws_between);
  Tensor loss = sum(mul(y, y));
  loss.backward();
  return {loss, x.grad(), p.w1.grad(), p.b1.grad(), p.w2.grad(), used.offset()};
}

void expect_same(const Outcome& a, const Outcome& b) {
  EXPECT_TRUE(equal(a.loss, b.loss));
  EXPECT_TRUE(equal(a.gx, b.gx));
  EXPECT_TRUE(equal(a.gw1, b.gw1));
  EXPECT_TRUE(equal(a.gb1, b.gb1));
  EXPECT_TRUE(equal(a.gw2, b.gw2));
  EXPECT_EQ(a.gen_offset_after, b.gen_offset_after);
}

TEST(Checkpoint, MatchesPlainRunWithDefaultGenerator) {
  DefaultGeneratorGuard guard;
  Outcome plain = run(false, false, 0);
  Outcome ckpt = run(true, false, 0);
  ASSERT_TRUE(plain.gw1.defined() && ckpt.gw1.defined());
  expect_same(plain, ckpt);
  // The forward's dropout drew kBatch * kHidden positions; the recompute drew none for good.
  EXPECT_EQ(ckpt.gen_offset_after, 500u + kBatch * kHidden);
}

TEST(Checkpoint, MatchesPlainRunWithPassedGenerator) {
  DefaultGeneratorGuard guard;
  Outcome plain = run(false, true, 0);
  Outcome ckpt = run(true, true, 0);
  expect_same(plain, ckpt);
  EXPECT_EQ(ckpt.gen_offset_after, 1000u + kBatch * kHidden);
}

TEST(Checkpoint, RecomputeUsesForwardStateAfterLaterDraws) {
  // Draws made between forward and backward (later layers) must not change the recomputed
  // mask, and the generator must end where those draws left it.
  DefaultGeneratorGuard guard;
  for (bool own : {false, true}) {
    Outcome plain = run(false, own, 321);
    Outcome ckpt = run(true, own, 321);
    expect_same(plain, ckpt);
    EXPECT_EQ(ckpt.gen_offset_after, (own ? 1000u : 500u) + kBatch * kHidden + 321u);
  }
}

TEST(Checkpoint, DropoutActuallyDropsInTheSegment) {
  // Guards the test's premise: with another mask the gradients would differ.
  DefaultGeneratorGuard guard;
  Outcome base = run(false, true, 0);
  Params p = Params::make();
  Generator data(3);
  Tensor x = randn({kBatch, kDim}, data);
  x.set_requires_grad(true);
  Generator other(99, 1001);  // the mask shifted by one position
  Tensor y = block(x, p, &other);
  sum(mul(y, y)).backward();
  EXPECT_FALSE(equal(x.grad(), base.gx));
}

TEST(Checkpoint, ParametersGetGradientsWhenInputsNeedNone) {
  // A model's first segment often takes plain data; its parameters still need gradients.
  DefaultGeneratorGuard guard;
  auto grads = [](bool checkpointed) {
    Params p = Params::make();
    Generator data(3);
    Tensor x = randn({kBatch, kDim}, data);  // does not require grad
    Generator gen(5);
    auto fn = [&p, &gen](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{block(in[0], p, &gen)};
    };
    Tensor y = checkpointed ? autograd::checkpoint(fn, {x}, {&gen})[0] : fn({x})[0];
    EXPECT_TRUE(y.requires_grad());
    sum(mul(y, y)).backward();
    return std::vector<Tensor>{p.w1.grad(), p.b1.grad(), p.w2.grad()};
  };
  std::vector<Tensor> plain = grads(false), ckpt = grads(true);
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_TRUE(ckpt[i].defined()) << "parameter " << i << " got no gradient";
    EXPECT_TRUE(equal(plain[i], ckpt[i])) << "parameter " << i;
  }
}

}  // namespace
}  // namespace tessera
