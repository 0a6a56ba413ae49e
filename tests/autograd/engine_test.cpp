// The tape: accumulation, no_grad, retain_graph, custom Functions, saved-tensor checks.

#include <gtest/gtest.h>

#include "tessera/tessera.h"

namespace tessera {
namespace {

Tensor leaf(std::vector<float> v, const Shape& s) {
  Tensor t = from_vector<float>(v, s);
  t.set_requires_grad(true);
  return t;
}

TEST(Autograd, ChainRuleThroughBroadcast) {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = leaf({10, 20, 30}, {3});
  Tensor y = sum(mul(add(x, b), x));  // d/dx = 2x + b, d/db = sum_rows(x)
  y.backward();
  EXPECT_EQ(to_vector<float>(x.grad()), (std::vector<float>{12, 24, 36, 18, 30, 42}));
  EXPECT_EQ(to_vector<float>(b.grad()), (std::vector<float>{5, 7, 9}));
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = leaf({1, 2}, {2});
  sum(x * 3.0).backward();
  sum(x * 3.0).backward();
  EXPECT_EQ(to_vector<float>(x.grad()), (std::vector<float>{6, 6}));
}

TEST(Autograd, SharedGradientIsNotAliasedBetweenLeaves) {
  // add's backward hands the same gradient to both inputs.
  Tensor a = leaf({1, 2}, {2}), b = leaf({3, 4}, {2});
  sum(a + b).backward();
  ops::add_(a.grad(), full_like(a.grad(), 1.0));
  EXPECT_EQ(to_vector<float>(b.grad()), (std::vector<float>{1, 1}));
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y;
  {
    NoGradGuard guard;
    y = sum(x * x);
  }
  EXPECT_FALSE(y.requires_grad());
  try {
    y.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not require grad"), std::string::npos);
  }
}

TEST(Autograd, SecondBackwardNeedsRetainGraph) {
  Tensor x = leaf({1, 2}, {2});
  Tensor y = sum(x * x);
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_EQ(to_vector<float>(x.grad()), (std::vector<float>{4, 8}));
  Tensor z = sum(x * x);
  z.backward();
  EXPECT_THROW(z.backward(), Error);
}

TEST(Autograd, InPlaceChangeOfSavedTensorIsCaught) {
  Tensor x = leaf({1, 2}, {2});
  Tensor w = from_vector<float>({3, 4}, {2});
  Tensor y = sum(x * w);
  ops::add_(w, full_like(w, 1.0));
  EXPECT_THROW(y.backward(), Error);
}

// A node keeps only what its backward reads. x * c with c constant needs c for x's gradient
// and nothing for c's, so x is not kept: the vocab-parallel embedding's masked lookup is such
// a product, and keeping x held one [tokens, h] activation per micro-batch in flight.
TEST(Autograd, AProductWithAConstantKeepsOnlyWhatTheGradientReads) {
  const int64_t n = int64_t(1) << 16;  // 256 KiB per tensor, a multiple of any rounding
  const int64_t bytes = n * 4;
  Tensor w = full(Shape{n}, 1.5);
  w.set_requires_grad(true);
  const Tensor c = full(Shape{n}, 2.0);
  Allocator& cpu = allocator_for(Device::cpu());
  for (int form = 0; form < 3; ++form) {
    SCOPED_TRACE(form == 0 ? "x * c" : form == 1 ? "c * x" : "x / c");
    w.set_grad(Tensor());
    const int64_t before = cpu.stats().live_bytes;
    Tensor y;
    {
      Tensor x = w + w;  // an intermediate that add's node does not keep
      y = form == 0 ? mul(x, c) : form == 1 ? mul(c, x) : div(x, c);
    }
    // Live: y alone. Keeping x would add its 256 KiB.
    EXPECT_EQ(cpu.stats().live_bytes - before, bytes);
    sum(y).backward();
    EXPECT_EQ(to_vector<float>(w.grad())[n - 1], form == 2 ? 1.f : 4.f);  // 2c or 2 / c
  }
  // Both factors trainable: each gradient reads the other factor, so both are kept.
  Tensor v = full(Shape{n}, 0.5);
  v.set_requires_grad(true);
  const int64_t before = cpu.stats().live_bytes;
  Tensor y;
  {
    Tensor x = w + w;
    y = mul(x, v);
  }
  EXPECT_EQ(cpu.stats().live_bytes - before, 2 * bytes);
  sum(y).backward();
  EXPECT_EQ(to_vector<float>(v.grad())[0], 3.f);
}

TEST(Autograd, CustomFunction) {
  struct Cube : autograd::Function {
    const char* name() const override { return "cube"; }
    std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
      save({in[0]});
      return {ops::mul(ops::mul(in[0], in[0]), in[0])};
    }
    std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
      Tensor x = saved(0);
      return {ops::mul(ops::mul(ops::mul(x, x), 3.0), g[0])};
    }
  };
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = autograd::apply_function(std::make_shared<Cube>(), {x})[0];
  EXPECT_EQ(to_vector<float>(y), (std::vector<float>{1, 8, 27}));
  sum(y).backward();
  EXPECT_EQ(to_vector<float>(x.grad()), (std::vector<float>{3, 12, 27}));
}

TEST(Autograd, PostAccumulateHookRunsOncePerBackward) {
  Tensor x = leaf({1, 2}, {2});
  int calls = 0;
  autograd::register_post_accumulate_hook(x, [&](const Tensor&) { ++calls; });
  sum(x * x + x * 2.0).backward();  // x used three times
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(to_vector<float>(x.grad()), (std::vector<float>{4, 6}));
}

TEST(Autograd, GradcheckCatchesAWrongFormula) {
  struct WrongSquare : autograd::Function {
    const char* name() const override { return "wrong_square"; }
    std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
      save({in[0]});
      return {ops::mul(in[0], in[0])};
    }
    std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
      return {ops::mul(ops::mul(saved(0), 2.1), g[0])};  // should be 2.0
    }
  };
  Tensor x = ops::cast(from_vector<float>({0.5f, -1.0f}, {2}), DType::f64);
  x.set_requires_grad(true);
  auto fn = [](const std::vector<Tensor>& in) {
    return autograd::apply_function(std::make_shared<WrongSquare>(), in)[0];
  };
  EXPECT_FALSE(autograd::gradcheck(fn, {x}).ok);
  auto right = [](const std::vector<Tensor>& in) { return in[0] * in[0]; };
  EXPECT_TRUE(autograd::gradcheck(right, {x}).ok);
}

}  // namespace
}  // namespace tessera
