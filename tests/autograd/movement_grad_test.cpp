// Gradients of movement ops in cases the op harness cannot express: pieces of a split that
// are never used, select, cat of three with a non-differentiable middle, ops that return
// their input unchanged, casts, and exact values for each kind of backward.

#include <gtest/gtest.h>

#include "tessera/tessera.h"

namespace tessera {
namespace {

Tensor iota(const Shape& s) {
  return ops::reshape(arange(0, double(s.numel()), 1, DType::f32), s);
}

Tensor leaf(const Shape& s) {
  Tensor t = iota(s);
  t.set_requires_grad(true);
  return t;
}

std::vector<float> values(const Tensor& t) {
  return to_vector<float>(t);
}

TEST(MovementGrad, SplitWithUnusedPiecesGetsZeros) {
  Tensor x = leaf({6, 2});
  std::vector<Tensor> pieces = split(x, 2, 0);  // rows [0, 2), [2, 4), [4, 6)
  ASSERT_EQ(pieces.size(), 3u);
  sum(mul(pieces[1], 3.0)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{0, 0, 0, 0, 3, 3, 3, 3, 0, 0, 0, 0}));
}

TEST(MovementGrad, SplitBySizesWithAnEmptyPieceAndAPieceUsedTwice) {
  Tensor x = leaf({2, 5});
  std::vector<Tensor> p = split(x, std::vector<int64_t>{1, 0, 3, 1}, -1);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[1].numel(), 0);
  // Piece 2 feeds two terms; piece 3 is unused.
  Tensor loss = add(sum(mul(p[2], p[2])), sum(add(p[0], p[2])));
  loss.backward();
  // Column 0 broadcasts over piece 2's three columns: 3. Columns 1..3: 2x + 1. Column 4: 0.
  EXPECT_EQ(values(x.grad()), (std::vector<float>{3, 3, 5, 7, 0, 3, 13, 15, 17, 0}));
}

TEST(MovementGrad, SelectScattersIntoItsColumn) {
  Tensor x = leaf({3, 4});
  Tensor c = select(x, 1, -1);  // column 3: 3, 7, 11
  Tensor r = select(x, 0, 1);   // row 1
  add(sum(mul(c, c)), sum(r)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{0, 0, 0, 6, 1, 1, 1, 15, 0, 0, 0, 22}));
}

TEST(MovementGrad, CatOfThreeSplitsTheGradient) {
  Tensor a = leaf({2, 3}), b = iota({2, 1}), c = leaf({2, 2});
  Tensor y = cat({a, b, c}, 1);  // b needs no gradient
  ASSERT_EQ(y.shape(), (Shape{2, 6}));
  Tensor w = iota({2, 6});
  sum(mul(y, w)).backward();
  EXPECT_EQ(values(a.grad()), (std::vector<float>{0, 1, 2, 6, 7, 8}));
  EXPECT_EQ(values(c.grad()), (std::vector<float>{4, 5, 10, 11}));
  EXPECT_FALSE(b.grad().defined());
}

TEST(MovementGrad, CatAlongNegativeDimWithMixedDTypes) {
  Tensor a = leaf({2, 1});
  Tensor b = ops::cast(iota({2, 2}), DType::f64);
  b.set_requires_grad(true);
  Tensor y = cat({a, b}, -1);  // promotes to f64
  EXPECT_EQ(y.dtype(), DType::f64);
  sum(mul(y, y)).backward();
  EXPECT_EQ(a.grad().dtype(), DType::f32);  // each input's gradient has its own dtype
  EXPECT_EQ(values(a.grad()), (std::vector<float>{0, 2}));
  EXPECT_EQ(to_vector<double>(b.grad()), (std::vector<double>{0, 2, 4, 6}));
}

TEST(MovementGrad, NoOpMovesReturnTheInputItself) {
  Tensor x = leaf({2, 3});
  EXPECT_TRUE(contiguous(x).is_same(x));
  EXPECT_TRUE(cast(x, DType::f32).is_same(x));
  EXPECT_TRUE(to(x, Device::cpu()).is_same(x));
  // A real copy records a node and passes the gradient through.
  Tensor t = transpose(x, 0, 1);
  Tensor c = contiguous(t);
  EXPECT_FALSE(c.is_same(t));
  EXPECT_TRUE(c.is_contiguous());
  sum(mul(c, iota({3, 2}))).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{0, 2, 4, 1, 3, 5}));
}

TEST(MovementGrad, CastBackConvertsTheGradient) {
  Tensor x = leaf({3});
  Tensor y = cast(x, DType::f64);
  sum(mul(y, y)).backward();
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  EXPECT_EQ(values(x.grad()), (std::vector<float>{0, 2, 4}));
  // Integer results carry no gradient.
  EXPECT_FALSE(cast(x, DType::i64).requires_grad());
}

TEST(MovementGrad, PermuteAndTransposeApplyTheInversePermutation) {
  Tensor x = leaf({2, 3, 4});
  Tensor y = permute(x, {2, 0, -2});  // [4, 2, 3]
  Tensor g = iota({4, 2, 3});
  y.backward(g);
  // x's gradient at (i, j, k) is g at (k, i, j).
  EXPECT_TRUE(equal(x.grad(), ops::contiguous(ops::permute(g, {1, 2, 0}))));
  Tensor z = leaf({2, 3, 4});
  transpose(z, -1, 0).backward(ops::transpose(g, 1, 2));  // a non-contiguous gradient
  EXPECT_TRUE(equal(x.grad(), ops::contiguous(z.grad())));
}

TEST(MovementGrad, TransposeOfAScalar) {
  Tensor x = scalar_tensor(3.0);
  x.set_requires_grad(true);
  mul(transpose(x, 0, -1), 2.0).backward();
  EXPECT_EQ(x.grad().item<float>(), 2.0f);
}

TEST(MovementGrad, ExpandSumsBack) {
  Tensor x = leaf({3, 1});
  sum(expand(x, {2, 3, 4})).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{8, 8, 8}));
}

TEST(MovementGrad, ReshapeLikesRestoreTheShape) {
  Tensor x = leaf({2, 3, 4});
  Tensor y = unsqueeze(flatten(squeeze(view(x, {2, 1, 12}), 1), 0), 0);  // [1, 24]
  ASSERT_EQ(y.shape(), (Shape{1, 24}));
  Tensor r = reshape(transpose(x, 0, 2), {-1});  // a copy: not viewable
  add(sum(mul(y, 2.0)), sum(mul(r, r))).backward();
  ASSERT_EQ(x.grad().shape(), x.shape());
  std::vector<float> g = values(x.grad());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], 2.0f + 2.0f * float(i)) << i;
}

TEST(MovementGrad, SliceAndNarrowScatter) {
  Tensor x = leaf({2, 7});
  Tensor s = slice(x, 1, -6, 100, 2);  // columns 1, 3, 5
  Tensor n = narrow(x, 0, 1, 1);       // row 1
  add(sum(s), sum(mul(n, 10.0))).backward();
  EXPECT_EQ(values(x.grad()),
            (std::vector<float>{0, 1, 0, 1, 0, 1, 0, 10, 11, 10, 11, 10, 11, 10}));
}

TEST(MovementGrad, ViewsOfViewsChain) {
  // A gradient through select(slice(transpose(x))) lands on the right element.
  Tensor x = leaf({4, 5});
  Tensor y = select(slice(transpose(x, 0, 1), 0, 1, 5, 2), 1, 2);  // x[2, 1] and x[2, 3]
  sum(mul(y, iota({2}) + 1.0)).backward();
  std::vector<float> g = values(x.grad());
  for (int i = 0; i < 20; ++i) {
    float expect = i == 11 ? 1.0f : i == 13 ? 2.0f : 0.0f;
    EXPECT_EQ(g[size_t(i)], expect) << i;
  }
}

}  // namespace
}  // namespace tessera
