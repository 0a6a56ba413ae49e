// The thin f32 GEMM (cpu/thin_gemm.h), which ops::matmul takes for x [M, K] · Wᵀ with 2 <= M <= 8:
// against an f64 reference over ragged shapes (K with and without an 8-lane tail, N with and
// without a 3-column remainder, M crossing the 4- and 2-row passes and the switch to Eigen at
// 9), with a bias, strided rows, a batch of products and the GELU epilogue; and the bits of a
// row, which depend neither on the rows it is batched with nor on the thread count.

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tessera/core/cpu/thin_gemm.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

// x [.., M, K] · w [N, K]ᵀ + bias in f64 with plain loops; x contiguous or a row-strided view.
std::vector<double> reference(const Tensor& x, const Tensor& w, const Tensor& bias) {
  const std::vector<double> xv = to_vector<double>(ops::contiguous(x)), wv = to_vector<double>(w);
  const int64_t K = w.size(1), N = w.size(0), rows = int64_t(xv.size()) / std::max<int64_t>(K, 1);
  const std::vector<double> bv = bias.defined() ? to_vector<double>(bias) : std::vector<double>();
  std::vector<double> out(size_t(rows * N));
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = bv.empty() ? 0.0 : bv[size_t(n)];
      for (int64_t k = 0; k < K; ++k) s += xv[size_t(m * K + k)] * wv[size_t(n * K + k)];
      out[size_t(m * N + n)] = s;
    }
  return out;
}

// The f32 result's worst error against the bound of a K-term dot product summed in f32:
// |error| <= (K + 2) 2^-24 sum_k |x_k w_k| (each of the K multiply-adds and the lane tree
// rounds once per level of accumulation, at most K + 2 of them along any path; the bias add
// once more). With N(0, 1) operands sum |x w| ~ 0.64 K, so a lost or repeated term (O(1))
// stands far outside it.
void expect_close(const Tensor& got, const std::vector<double>& want, const Tensor& x,
                  const Tensor& w, const std::string& what) {
  const std::vector<double> g = to_vector<double>(got);
  const std::vector<double> xv = to_vector<double>(ops::contiguous(x)), wv = to_vector<double>(w);
  const int64_t K = w.size(1), N = w.size(0);
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    const int64_t m = int64_t(i) / N, n = int64_t(i) % N;
    double magnitude = 1;  // the bias
    for (int64_t k = 0; k < K; ++k)
      magnitude += std::abs(xv[size_t(m * K + k)] * wv[size_t(n * K + k)]);
    ASSERT_LE(std::abs(g[i] - want[i]), double(K + 3) * std::ldexp(1.0, -24) * magnitude)
        << what << ", output " << i << ": " << g[i] << " against " << want[i];
  }
}

TEST(ThinGemm, MatchesTheF64ReferenceOnRaggedShapes) {
  if (!cpu::thin_gemm_available()) GTEST_SKIP() << "this build has no AVX2 and FMA";
  Generator gen(31);
  for (int64_t M : {1, 2, 3, 4, 5, 7, 8, 9})
    for (int64_t K : {1, 7, 8, 13, 96, 770})
      for (int64_t N : {1, 2, 3, 4, 7, 40}) {
        const Tensor x = randn({M, K}, gen), w = randn({N, K}, gen), bias = randn({N}, gen);
        const bool with_bias = (M + K + N) % 2 == 0;
        const Tensor b = with_bias ? bias : Tensor();
        const std::string what =
            str_cat("M ", M, " K ", K, " N ", N, with_bias ? " with bias" : " without bias");
        expect_close(ops::matmul(x, w, false, true, b), reference(x, w, b), x, w, what);
      }
}

// Rows of a wider tensor (row stride 100 > K), and matmul_gelu's epilogue on the thin path's
// pieces (its pre-activation equals the plain product's bits).
TEST(ThinGemm, StridedRowsAndTheGeluEpilogue) {
  if (!cpu::thin_gemm_available()) GTEST_SKIP() << "this build has no AVX2 and FMA";
  Generator gen(32);
  const Tensor wide = randn({5, 100}, gen), w = randn({50, 64}, gen), bias = randn({50}, gen);
  const Tensor x = ops::narrow(wide, 1, 3, 64);  // [5, 64], row stride 100
  ASSERT_FALSE(x.is_contiguous());
  expect_close(ops::matmul(x, w, false, true, bias), reference(x, w, bias), x, w, "strided rows");

  // x [3, 6, 64] against a 2-d weight folds into one product of 18 rows (Eigen's); the thin
  // path's own batches are products with a weight each, below.
  const Tensor xb = randn({3, 6, 64}, gen);
  expect_close(ops::matmul(xb, w, false, true, bias), reference(xb, w, bias), xb, w, "batch of 3");
  // matmul_gelu on the 5 strided rows: the thin path's pieces through the GELU epilogue.
  const Tensor pre = ops::matmul(x, w, false, true, bias);
  const ops::MatmulGelu fused = ops::matmul_gelu(x, w, false, true, bias);
  EXPECT_TRUE(equal(fused.pre, pre));
  EXPECT_TRUE(equal(fused.out, ops::unary(UnaryOp::gelu, pre)));
}

// A batch of products, each with its own weight (attention's heads): eight products of
// 6 x 64 x 50 (153,600 multiply-adds, past the threshold at which the batch is spread over the
// threads product by product). Each against the reference, and the same bits with 1 and 2
// threads.
TEST(ThinGemm, ABatchOfProductsSpreadOverTheThreads) {
  if (!cpu::thin_gemm_available()) GTEST_SKIP() << "this build has no AVX2 and FMA";
  Generator gen(34);
  const Tensor x = randn({8, 6, 64}, gen), w = randn({8, 50, 64}, gen);
  ScopedNumThreads guard(1);
  const Tensor one = ops::matmul(x, w, false, true);
  for (int64_t i = 0; i < 8; ++i) {
    const Tensor xi = ops::narrow(x, 0, i, 1), wi = ops::reshape(ops::narrow(w, 0, i, 1), {50, 64});
    expect_close(ops::narrow(one, 0, i, 1), reference(xi, wi, Tensor()), xi, wi,
                 str_cat("product ", i));
  }
  set_num_threads(2);
  EXPECT_TRUE(equal(ops::matmul(x, w, false, true), one));
}

// A row's bits in every batch of 2 to 8 rows, with 1 and 2 threads: the serving engine batches
// sequences and relies on it. The reference is the row in a batch of two (itself twice). One
// row alone runs on Eigen's GEMV and a batch of 9 on Eigen's GEBP, which promise nothing of the
// kind; they are checked only against the f64 reference above.
TEST(ThinGemm, ARowHasTheSameBitsInAnyBatchAndWithAnyThreadCount) {
  if (!cpu::thin_gemm_available()) GTEST_SKIP() << "this build has no AVX2 and FMA";
  Generator gen(33);
  const Tensor w = randn({301, 770}, gen), bias = randn({301}, gen), x = randn({8, 770}, gen);
  ScopedNumThreads guard(1);
  std::vector<Tensor> paired;
  for (int64_t m = 0; m < 8; ++m) {
    const Tensor row = ops::narrow(x, 0, m, 1);
    const Tensor twice = ops::matmul(ops::cat({row, row}, 0), w, false, true, bias);
    ASSERT_TRUE(equal(ops::narrow(twice, 0, 0, 1), ops::narrow(twice, 0, 1, 1)));
    paired.push_back(ops::narrow(twice, 0, 0, 1));
  }
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (int64_t M = 2; M <= 8; ++M) {
      const Tensor batch = ops::matmul(ops::narrow(x, 0, 0, M), w, false, true, bias);
      for (int64_t m = 0; m < M; ++m)
        ASSERT_TRUE(equal(ops::narrow(batch, 0, m, 1), paired[size_t(m)]))
            << "row " << m << " of a batch of " << M << " with " << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace tessera
