// ops::matmul beyond the harness: bad input, accumulation into an existing output, the no-copy
// layout plan (counted allocations), and shapes big enough for Eigen's blocked and threaded
// GEMM paths.

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "support/error_of.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

// Runs f and returns how many allocations the CPU allocator saw meanwhile.
template <class F>
int64_t count_allocs(F&& f) {
  Allocator& alloc = allocator_for(Device::cpu());
  int64_t before = alloc.stats().num_allocs;
  f();
  return alloc.stats().num_allocs - before;
}

// The flat row-major index into `shape` of the element a broadcast index `idx` (aligned to
// the right, size-1 dims pinned to 0) maps to.
int64_t flat_index(const Shape& shape, const std::vector<int64_t>& idx) {
  int lead = int(idx.size()) - shape.size();
  int64_t flat = 0;
  for (int d = 0; d < shape.size(); ++d)
    flat = flat * shape[d] + (shape[d] == 1 ? 0 : idx[size_t(lead + d)]);
  return flat;
}

// op(a) op(b) with plain loops in f64.
Tensor reference(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  std::vector<double> av = to_vector<double>(a), bv = to_vector<double>(b);
  const int64_t m = ta ? a.size(-1) : a.size(-2), k = ta ? a.size(-2) : a.size(-1);
  const int64_t n = tb ? b.size(-2) : b.size(-1);
  Shape ba, bb;
  for (int i = 0; i + 2 < a.dim(); ++i) ba.push_back(a.shape()[i]);
  for (int i = 0; i + 2 < b.dim(); ++i) bb.push_back(b.shape()[i]);
  Shape shape = broadcast_shapes(ba, bb, "reference");
  const size_t nb = size_t(shape.size());
  shape.push_back(m);
  shape.push_back(n);
  std::vector<double> out(size_t(shape.numel()));
  std::vector<int64_t> idx(nb + 2, 0), ia(nb + 2), ib(nb + 2);
  for (int64_t flat = 0; flat < shape.numel(); ++flat) {
    int64_t rest = flat;
    for (int d = shape.size() - 1; d >= 0; --d) {
      idx[size_t(d)] = rest % shape[d];
      rest /= shape[d];
    }
    ia = idx;
    ib = idx;
    double s = 0;
    for (int64_t p = 0; p < k; ++p) {
      ia[nb] = ta ? p : idx[nb];
      ia[nb + 1] = ta ? idx[nb] : p;
      ib[nb] = tb ? idx[nb + 1] : p;
      ib[nb + 1] = tb ? p : idx[nb + 1];
      s += av[size_t(flat_index(a.shape(), ia))] * bv[size_t(flat_index(b.shape(), ib))];
    }
    out[size_t(flat)] = s;
  }
  return from_vector<double>(out, shape);
}

::testing::AssertionResult close(const Tensor& got, const Tensor& want, double rtol, double atol) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << got.describe() << " vs " << want.describe();
  CloseReport r = compare_close(got, want, rtol, atol);
  if (r.ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << r.message;
}

using tessera::testing::error_of;

TEST(Matmul, InnerDimMismatchNamesBothShapesAndFlags) {
  Tensor a = zeros({2, 3}), b = zeros({4, 5});
  std::string msg = error_of([&] { ops::matmul(a, b); });
  EXPECT_NE(msg.find("f32[2, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[4, 5]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("trans_a=false"), std::string::npos) << msg;
  EXPECT_NE(msg.find("trans_b=false"), std::string::npos) << msg;
  msg = error_of([&] { ops::matmul(a, b, true, true); });
  EXPECT_NE(msg.find("trans_a=true"), std::string::npos) << msg;
  EXPECT_NE(msg.find("K=2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("K=5"), std::string::npos) << msg;
}

TEST(Matmul, RejectsBadInput) {
  EXPECT_THROW(ops::matmul(zeros({3}), zeros({3, 2})), Error);
  EXPECT_THROW(ops::matmul(zeros({2, 3}), zeros({3})), Error);
  EXPECT_THROW(ops::matmul(zeros({2, 3}, DType::i32), zeros({3, 2}, DType::i32)), Error);
  EXPECT_THROW(ops::matmul(zeros({2, 3}), zeros({3, 2}, DType::i64)), Error);
  EXPECT_THROW(ops::matmul(zeros({2, 2, 3}), zeros({3, 3, 4})), Error);  // batch 2 vs 3
  EXPECT_THROW(ops::matmul(Tensor(), zeros({3, 2})), Error);
  std::string msg = error_of([] { ops::matmul(zeros({2, 3}, DType::i32), zeros({3, 2})); });
  EXPECT_NE(msg.find("i32[2, 3]"), std::string::npos) << msg;
}

TEST(Matmul, RejectsBadBias) {
  Tensor a = zeros({2, 3}), b = zeros({3, 4});
  std::string msg = error_of([&] { ops::matmul(a, b, false, false, zeros({5})); });
  EXPECT_NE(msg.find("bias must have shape [4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("f32[5]"), std::string::npos) << msg;
  EXPECT_THROW(ops::matmul(a, b, false, false, zeros({1, 4})), Error);
  EXPECT_THROW(ops::matmul(a, b, false, false, zeros({4}, DType::i32)), Error);
}

TEST(Matmul, MatmulOutRejectsBadOutput) {
  Tensor a = ones({2, 3}), b = ones({3, 4});
  EXPECT_THROW(ops::matmul_out(zeros({2, 5}), a, b), Error);
  EXPECT_THROW(ops::matmul_out(zeros({2, 4}, DType::i32), a, b), Error);
  Tensor buf = zeros({20});
  Tensor out = ops::view(ops::narrow(buf, 0, 0, 8), {2, 4});
  Tensor a_alias = ops::view(ops::narrow(buf, 0, 8, 6), {2, 3});
  EXPECT_THROW(ops::matmul_out(out, a_alias, b), Error);  // reads and writes one buffer
}

TEST(Matmul, LinearRejectsBadWeight) {
  EXPECT_THROW(tessera::linear(zeros({2, 3}), zeros({3})), Error);
  EXPECT_THROW(tessera::linear(zeros({2, 3}), zeros({4, 5})), Error);
  EXPECT_THROW(tessera::linear(zeros({3}), zeros({4, 3})), Error);
}

TEST(Matmul, MatmulOutAccumulates) {
  Generator gen(7);
  Tensor a = randn({2, 5, 6}, gen), b = randn({6, 3}, gen), c0 = randn({2, 5, 3}, gen);
  Tensor ab = reference(a, b, false, false);
  // Sums of 6 products of N(0, 1) values in f32: round-off far below 1e-5.
  const double tol = 1e-5;

  Tensor out = ops::clone(c0);
  ops::matmul_out(out, a, b, false, false, 1.0f, 1.0f);
  EXPECT_TRUE(close(out, ops::add(ops::cast(c0, DType::f64), ab), tol, tol));

  // Twice more with alpha 0.5 and beta 2: out = 2 (c0 + ab) + ab / 2.
  out = ops::clone(c0);
  ops::matmul_out(out, a, b, false, false, 1.0f, 1.0f);
  ops::matmul_out(out, a, b, false, false, 0.5f, 2.0f);
  Tensor want = ops::add(ops::mul(ops::add(ops::cast(c0, DType::f64), ab), 2.0), ops::mul(ab, 0.5));
  EXPECT_TRUE(close(out, want, tol, tol));

  // beta = 0 ignores what out held (NaN here).
  out = full({2, 5, 3}, std::nan(""));
  ops::matmul_out(out, a, b);
  EXPECT_TRUE(close(out, ab, tol, tol));
}

TEST(Matmul, MatmulOutIntoStridedAndHalfOutputs) {
  Generator gen(8);
  Tensor a = randn({4, 6}, gen), b = randn({5, 6}, gen);
  Tensor ab = reference(a, b, false, true);
  // out is a transposed view of a [5, 4] buffer: accumulated through a contiguous copy.
  Tensor base = randn({5, 4}, gen);
  Tensor out = ops::transpose(base, 0, 1);
  Tensor before = ops::cast(out, DType::f64);
  ops::matmul_out(out, a, b, false, true, 1.0f, 1.0f);
  EXPECT_TRUE(close(out, ops::add(before, ab), 1e-5, 1e-5));  // 6-term f32 sums

  // A bf16 gradient buffer accumulating an f32 product: computed in f32, rounded once.
  Tensor half = ops::cast(randn({4, 5}, gen), DType::bf16);
  Tensor half_before = ops::cast(half, DType::f64);
  ops::matmul_out(half, a, b, false, true, 1.0f, 1.0f);
  EXPECT_EQ(half.dtype(), DType::bf16);
  // One bf16 rounding of values below ~10: relative 2^-8.
  EXPECT_TRUE(close(half, ops::add(half_before, ab), 1.0 / 256, 1e-6));
}

TEST(Matmul, LinearOnActivationsIsOneAllocation) {
  Generator gen(9);
  Tensor x = randn({4, 16, 32}, gen), w = randn({32, 24}, gen), wt = randn({24, 32}, gen);
  Tensor y;
  // [B, T, C] x [C, N]: folded into one (B*T) x C x N GEMM; only the output is allocated.
  EXPECT_EQ(count_allocs([&] { y = ops::matmul(x, w); }), 1);
  EXPECT_TRUE(close(y, reference(x, w, false, false), 1e-5, 1e-4));  // 32-term sums
  // The linear layout, weight [N, C] used transposed.
  EXPECT_EQ(count_allocs([&] { y = ops::matmul(x, wt, false, true); }), 1);
  EXPECT_TRUE(close(y, reference(x, wt, false, true), 1e-5, 1e-4));
  // A transposed view passed without the flag is mapped column-major, not copied.
  Tensor wt_view = ops::transpose(wt, 0, 1);
  EXPECT_EQ(count_allocs([&] { y = ops::matmul(x, wt_view); }), 1);
  EXPECT_TRUE(close(y, reference(x, wt_view, false, false), 1e-5, 1e-4));
  // A bias of the compute dtype is read in place.
  Tensor bias = randn({24}, gen);
  EXPECT_EQ(count_allocs([&] { y = ops::matmul(x, wt, false, true, bias); }), 1);
  // A strided slice has unit stride in neither dim: that operand alone is copied.
  Tensor w_strided = ops::slice(randn({32, 48}, gen), 1, 0, 48, 2);
  EXPECT_EQ(count_allocs([&] { y = ops::matmul(x, w_strided); }), 2);
  EXPECT_TRUE(close(y, reference(x, w_strided, false, false), 1e-5, 1e-4));
}

TEST(Matmul, BatchedViewsAreNotCopied) {
  Generator gen(10);
  // q [B, H, T, D] as a permuted view of [B, T, H, D]: batch dims do not fold into one stride,
  // so the front end loops over B and hands the backend H GEMMs per call.
  Tensor q = ops::permute(randn({2, 5, 3, 4}, gen), {0, 2, 1, 3});
  Tensor k = ops::permute(randn({2, 5, 3, 4}, gen), {0, 2, 1, 3});
  Tensor s;
  EXPECT_EQ(count_allocs([&] { s = ops::matmul(q, k, false, true); }), 1);
  EXPECT_TRUE(close(s, reference(q, k, false, true), 1e-5, 1e-5));  // 4-term sums
  // b broadcast over a's leading batch dim.
  Tensor b = randn({3, 4, 6}, gen);
  EXPECT_EQ(count_allocs([&] { s = ops::matmul(q, b); }), 1);
  EXPECT_TRUE(close(s, reference(q, b, false, false), 1e-5, 1e-5));
}

// Broadcast (stride-0) matrices, size-1 dims with arbitrary strides and outer products.
TEST(Matmul, OddLayoutsMatchReference) {
  Generator gen(14);
  struct Pair {
    Tensor a, b;
  };
  const Pair pairs[] = {
      {ops::expand(randn({1, 5}, gen), {4, 5}), randn({5, 3}, gen)},
      {ops::expand(randn({1, 4, 5}, gen), {3, 4, 5}), randn({5, 3}, gen)},
      {ops::expand(randn({4, 1, 5}, gen), {4, 3, 5}), randn({5, 2}, gen)},
      {ops::slice(randn({4, 3}, gen), 1, 1, 2), randn({1, 6}, gen)},
      {randn({4, 5}, gen), ops::slice(randn({5, 7}, gen), 1, 2, 3)},
      {ops::slice(randn({3, 6, 5}, gen), 1, 2, 3), randn({3, 5, 2}, gen)},
      {ops::slice(randn({2, 9, 5}, gen), 1, 0, 9, 3), randn({5, 4}, gen)},
  };
  for (const Pair& p : pairs) {
    // At most 5-term sums of N(0, 1) products in f32.
    EXPECT_TRUE(close(ops::matmul(p.a, p.b), reference(p.a, p.b, false, false), 1e-5, 1e-5))
        << p.a.describe() << " strides " << p.a.strides() << " x " << p.b.describe();
  }
}

// Shapes past Eigen's small-product cutoff and its cache blocks, all transpose combinations,
// single large GEMMs (Eigen's threads) and batches of small ones (threads over the batch).
TEST(Matmul, LargeShapesMatchReference) {
  Generator gen(11);
  struct Shape3 {
    int64_t batch_a, batch_b, m, k, n;
  };
  const Shape3 shapes[] = {{0, 0, 67, 131, 45},
                           {0, 0, 300, 257, 190},
                           {3, 0, 41, 70, 33},
                           {8, 8, 17, 29, 23},
                           {5, 1, 33, 64, 9}};
  for (const Shape3& s : shapes) {
    for (int flags = 0; flags < 4; ++flags) {
      bool ta = flags & 1, tb = flags & 2;
      Shape as = ta ? Shape{s.k, s.m} : Shape{s.m, s.k};
      Shape bs = tb ? Shape{s.n, s.k} : Shape{s.k, s.n};
      if (s.batch_a) as.insert(0, s.batch_a);
      if (s.batch_b) bs.insert(0, s.batch_b);
      Tensor a = randn(as, gen), b = randn(bs, gen);
      Tensor got = ops::matmul(a, b, ta, tb);
      // Worst-case f32 dot-product error is about K * 2^-24 * sum|a_k b_k| ~ 2.5e-3 for
      // K = 257 with N(0, 1) values (E|a b| = 2/pi); blocked sums stay well inside it.
      EXPECT_TRUE(close(got, reference(a, b, ta, tb), 1e-5, 2.5e-3))
          << "batch " << s.batch_a << "/" << s.batch_b << " m " << s.m << " k " << s.k << " n "
          << s.n << " trans " << ta << tb;
    }
  }
}

TEST(Matmul, HalfTypesComputeInF32) {
  Generator gen(12);
  for (DType dt : {DType::bf16, DType::f16}) {
    Tensor a = ops::cast(randn({3, 7, 20}, gen), dt), b = ops::cast(randn({20, 9}, gen), dt);
    Tensor bias = ops::cast(randn({9}, gen), dt);
    Tensor got = ops::matmul(a, b, false, false, bias);
    EXPECT_EQ(got.dtype(), dt);
    Tensor want = ops::add(reference(a, b, false, false), ops::cast(bias, DType::f64));
    // Inputs are exact in both; the f32 result is rounded once to 8 (bf16) or 11 (f16)
    // significant bits: relative 2^-8 bounds both.
    EXPECT_TRUE(close(got, want, 1.0 / 256, 1e-5)) << dtype_name(dt);
  }
  // Mixed f32 x bf16 promotes to f32.
  Tensor mixed = ops::matmul(ones({2, 3}), ones({3, 2}, DType::bf16));
  EXPECT_EQ(mixed.dtype(), DType::f32);
}

TEST(Matmul, EmptyInnerDimGivesBias) {
  Tensor a = zeros({2, 4, 0}), b = zeros({0, 3});
  Tensor bias = from_vector<float>({1, 2, 3}, {3});
  EXPECT_EQ(to_vector<float>(ops::matmul(a, b)), std::vector<float>(24, 0.0f));
  Tensor y = ops::matmul(a, b, false, false, bias);
  EXPECT_EQ(y.shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(to_vector<float>(y)[5], 3.0f);
  Tensor out = full({2, 4, 3}, 2.0);
  ops::matmul_out(out, a, b, false, false, 1.0f, 0.5f);
  EXPECT_EQ(to_vector<float>(out), std::vector<float>(24, 1.0f));
  EXPECT_EQ(ops::matmul(zeros({0, 5}), zeros({5, 3})).shape(), (Shape{0, 3}));
}

TEST(Matmul, SharedWeightGradientMatchesPerBatchSum) {
  Generator gen(13);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = randn(ta ? Shape{3, 5, 8, 4} : Shape{3, 5, 4, 8}, gen, DType::f64);
      Tensor w = randn(tb ? Shape{6, 8} : Shape{8, 6}, gen, DType::f64);
      Tensor g = randn({3, 5, 4, 6}, gen, DType::f64);
      w.set_requires_grad(true);
      tessera::matmul(a, w, ta, tb).backward(g);
      // dW' = sum over the batch of A'^T G, from per-matrix loops.
      Tensor want = ops::sum(reference(a, g, !ta, false), {0, 1});
      if (tb) want = ops::contiguous(ops::transpose(want, 0, 1));
      EXPECT_TRUE(close(w.grad(), want, 1e-12, 1e-12)) << ta << tb;  // f64 sums of 60 terms
    }
  }
}

}  // namespace
}  // namespace tessera
