// The tensor-parallel region functions: forward and backward of each against values computed
// by hand. Every value is a small integer, so sums are exact and the checks are equalities.

#include <string>
#include <vector>

#include "parallel/rank_test.h"
#include "tessera/parallel/tp/detail/regions.h"
#include "tests/parallel/tp_test_util.h"

namespace tessera::parallel {
namespace {

using testing::leaf;
using testing::make_tp;

// [A, S, B] with element (a, s, b) = base + (a S + s) B + b.
Tensor block(int64_t a, int64_t s, int64_t b, double base) {
  std::vector<float> v(static_cast<size_t>(a * s * b));
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(base + double(i));
  return from_vector<float>(v, {a, s, b});
}

// Element (i, j, k) of a [*, *, K] tensor.
float at(const std::vector<float>& v, int64_t J, int64_t K, int64_t i, int64_t j, int64_t k) {
  return v[size_t((i * J + j) * K + k)];
}

void regions(int t) {
  auto tpo = make_tp(t, false);
  const auto& g = tpo->group();
  const int r = g->rank();
  const float sum_ranks = float(t * (t + 1) / 2);  // sum over ranks of (rank + 1)

  // copy_to_region: identity forward, all-reduce backward.
  Tensor x = leaf(full({3}, 5.0));
  Tensor y = tp::copy_to_region(x, g);
  EXPECT_EQ(to_vector<float>(y), std::vector<float>(3, 5.f));
  y.backward(full({3}, double(r + 1)));
  EXPECT_EQ(to_vector<float>(x.grad()), std::vector<float>(3, sum_ranks));

  // reduce_from_region: all-reduce forward, identity backward.
  x = leaf(full({2}, double(r + 1)));
  y = tp::reduce_from_region(x, g);
  EXPECT_EQ(to_vector<float>(y), std::vector<float>(2, sum_ranks));
  y.backward(full({2}, 3.0));
  EXPECT_EQ(to_vector<float>(x.grad()), std::vector<float>(2, 3.f));

  // gather_from_region along dim 1 joins the ranks' [2, 3, 2] blocks in rank order; its
  // backward hands each rank its slice of the gradient.
  x = leaf(block(2, 3, 2, 100.0 * r));
  y = tp::gather_from_region(x, 1, g);
  ASSERT_EQ(y.shape(), Shape({2, 3 * t, 2}));
  std::vector<float> yv = to_vector<float>(y);
  for (int k = 0; k < t; ++k)
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j)
        EXPECT_EQ(at(yv, 3 * t, 2, i, 3 * k + j, 1), float(100 * k + (i * 3 + j) * 2 + 1));
  Tensor gy = block(2, 3 * t, 2, 0.0);
  y.backward(gy);
  EXPECT_EQ(to_vector<float>(x.grad()), to_vector<float>(ops::narrow(gy, 1, 3 * r, 3)));

  // scatter_to_region along the last dim, and its all-gather backward.
  Tensor whole = block(2, 2, 2 * t, 0.0);
  x = leaf(whole);
  y = tp::scatter_to_region(x, -1, g);
  EXPECT_EQ(to_vector<float>(y), to_vector<float>(ops::narrow(whole, 2, 2 * r, 2)));
  y.backward(full({2, 2, 2}, double(r + 1)));
  std::vector<float> gx = to_vector<float>(x.grad());
  for (int k = 0; k < t; ++k) EXPECT_EQ(at(gx, 2, 2 * t, 1, 1, 2 * k), float(k + 1));

  // sequence_gather: all-gather forward, reduce-scatter backward (each rank's gradient for the
  // gathered sequence is a partial sum).
  x = leaf(block(2, 2, 3, 10.0 * r));
  y = tp::sequence_gather(x, g);
  ASSERT_EQ(y.shape(), Shape({2, 2 * t, 3}));
  gy = block(2, 2 * t, 3, 0.0);
  y.backward(gy);
  Tensor expected = ops::mul(ops::narrow(gy, 1, 2 * r, 2), double(t));
  EXPECT_EQ(to_vector<float>(x.grad()), to_vector<float>(expected));

  // sequence_reduce_scatter: reduce-scatter forward, all-gather backward.
  x = leaf(ops::mul(block(2, 2 * t, 3, 0.0), double(r + 1)));
  y = tp::sequence_reduce_scatter(x, g);
  expected = ops::mul(ops::narrow(block(2, 2 * t, 3, 0.0), 1, 2 * r, 2), double(sum_ranks));
  EXPECT_EQ(to_vector<float>(y), to_vector<float>(expected));
  y.backward(full({2, 2, 3}, double(r + 1)));
  gx = to_vector<float>(x.grad());
  for (int k = 0; k < t; ++k) EXPECT_EQ(at(gx, 2 * t, 3, 1, 2 * k + 1, 2), float(k + 1));

  // Under no_grad the functions still communicate but record nothing.
  {
    NoGradGuard no_grad;
    Tensor z = tp::reduce_from_region(leaf(full({1}, 1.0)), g);
    EXPECT_FALSE(z.requires_grad());
    EXPECT_EQ(z.item<float>(), float(t));
  }

  // A dim that does not split evenly is an error naming the shape and the group, raised on
  // every rank before any communication.
  try {
    tp::sequence_reduce_scatter(zeros({2, 2 * t + 1, 3}), g);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("group tp"), std::string::npos) << e.what();
  }
}

RANK_TEST(TensorParallelRegionsN2, ForwardAndBackwardByHand) {
  regions(2);
}

RANK_TEST(TensorParallelRegionsN4, ForwardAndBackwardByHand) {
  regions(4);
}

RANK_TEST(TensorParallelRegionsN4, TwoGroupsOfTwo) {
  // dp = 2 x tp = 2: each pair of ranks reduces only among itself.
  regions(2);
}

}  // namespace
}  // namespace tessera::parallel
