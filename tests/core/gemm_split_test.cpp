// The CPU GEMM's work split (cpu_matmul.cpp): each product is cut along the larger of M and N
// into pieces that threads take dynamically. Checked here: pieces with ragged edges (sizes that
// are no multiple of the piece alignment) still tile the output exactly, including the bias
// and the alpha/beta accumulation applied per piece; and the bits do not depend on the thread
// count, since the cut depends on the shape alone.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "tessera/tessera.h"

namespace tessera {
namespace {

// alpha * op(a) op(b) + beta * c0 + bias, in f64 with plain loops; a, b 2-d.
std::vector<double> reference(const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha,
                              double beta, const Tensor& c0, const Tensor& bias) {
  const std::vector<double> av = to_vector<double>(a), bv = to_vector<double>(b);
  const int64_t m = ta ? a.size(1) : a.size(0), k = ta ? a.size(0) : a.size(1);
  const int64_t n = tb ? b.size(0) : b.size(1);
  std::vector<double> out(size_t(m * n), 0.0);
  if (c0.defined()) out = to_vector<double>(c0);
  const std::vector<double> bi = bias.defined() ? to_vector<double>(bias) : std::vector<double>();
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p)
        s += av[size_t(ta ? p * m + i : i * k + p)] * bv[size_t(tb ? j * k + p : p * n + j)];
      double& o = out[size_t(i * n + j)];
      o = alpha * s + beta * o + (bi.empty() ? 0.0 : bi[size_t(j)]);
    }
  }
  return out;
}

// Largest |got - want|. With N(0, 1) operands and K = 96 the f32 rounding error of a dot
// product is at most about K * 2^-24 * sum|a_k b_k| ~ 96 * 6e-8 * 61 = 3.5e-4; a piece that
// lost, repeated or shifted a row or column would be off by O(1).
double max_error(const Tensor& got, const std::vector<double>& want) {
  const std::vector<double> g = to_vector<double>(got);
  EXPECT_EQ(g.size(), want.size());
  double e = 0;
  for (size_t i = 0; i < std::min(g.size(), want.size()); ++i)
    e = std::max(e, std::abs(g[i] - want[i]));
  return e;
}
constexpr double kTolerance = 1e-3;
constexpr int64_t K = 96;

// Wide (cut along N: 1030 columns, pieces of about 256 starting at multiples of 16) and tall
// (cut along M: 1111 rows) products, in every transpose combination, with a bias.
TEST(GemmSplit, RaggedPiecesTileTheOutputWithBias) {
  Generator gen(21);
  const std::pair<int64_t, int64_t> shapes[] = {{37, 1030}, {1111, 40}, {300, 301}};
  for (auto [m, n] : shapes) {
    for (int flags = 0; flags < 4; ++flags) {
      const bool ta = flags & 1, tb = flags & 2;
      Tensor a = randn(ta ? Shape{K, m} : Shape{m, K}, gen);
      Tensor b = randn(tb ? Shape{n, K} : Shape{K, n}, gen);
      Tensor bias = randn({n}, gen);
      Tensor got = ops::matmul(a, b, ta, tb, bias);
      EXPECT_LT(max_error(got, reference(a, b, ta, tb, 1.0, 0.0, Tensor(), bias)), kTolerance)
          << "m " << m << " n " << n << " trans " << ta << tb;
    }
  }
}

// out = alpha * a b + beta * out, applied piece by piece.
TEST(GemmSplit, AlphaAndBetaApplyToEveryPiece) {
  Generator gen(22);
  for (auto [m, n] : {std::pair<int64_t, int64_t>{29, 777}, {801, 33}}) {
    Tensor a = randn({m, K}, gen), b = randn({K, n}, gen), c0 = randn({m, n}, gen);
    Tensor out = ops::clone(c0);
    ops::matmul_out(out, a, b, false, false, 0.5f, 1.0f);
    EXPECT_LT(max_error(out, reference(a, b, false, false, 0.5, 1.0, c0, Tensor())), kTolerance)
        << "beta 1, m " << m << " n " << n;
    out = ops::clone(c0);
    ops::matmul_out(out, a, b, false, false, 1.0f, 0.25f);
    EXPECT_LT(max_error(out, reference(a, b, false, false, 1.0, 0.25, c0, Tensor())), kTolerance)
        << "beta 0.25, m " << m << " n " << n;
  }
}

// Identical bits with 1 and 2 threads: a linear layer forward and its two gradients at a
// GPT-like shape (several pieces each), a batch of products, and an accumulating matmul_out.
// K = 400 is deeper than the k-block Eigen's own threaded path uses (320, against 400 on its
// single-threaded path), so handing a product to Eigen's threading would change the bits.
TEST(GemmSplit, BitsDoNotDependOnTheThreadCount) {
  Generator gen(23);
  Tensor x = randn({2, 96, 400}, gen), w = randn({1000, 400}, gen), bias = randn({1000}, gen);
  Tensor g = randn({2, 96, 1000}, gen);
  Tensor qa = randn({6, 70, 48}, gen), qb = randn({6, 48, 90}, gen), c0 = randn({192, 1000}, gen);
  Tensor g2 = ops::reshape(g, {192, 1000}), x2 = ops::reshape(x, {192, 400});
  auto run = [&] {
    Tensor acc = ops::clone(c0);
    ops::matmul_out(acc, x2, w, false, true, 1.0f, 1.0f);
    Tensor forward = ops::matmul(x, w, false, true, bias);
    Tensor dx = ops::matmul(g, w);
    Tensor dw = ops::matmul(g2, x2, true, false);
    return std::vector<Tensor>{forward, dx, dw, ops::matmul(qa, qb), acc};
  };
  ScopedNumThreads guard(1);
  const std::vector<Tensor> one = run();
  set_num_threads(2);
  const std::vector<Tensor> two = run();
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(equal(one[i], two[i])) << "output " << i;
}

}  // namespace
}  // namespace tessera
