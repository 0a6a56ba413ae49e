// Harness cases for the fused cross-entropy (all classes, and the first num_classes columns of a
// padded vocabulary), plus checks the harness does not make: the f32 and bf16 backward kernels
// against (softmax - onehot) / valid, all-ignored batches, an ignore_index that is a valid
// class, large logits, a loss independent of the thread count, and the class limit's padded
// columns, reads in place and errors.

#include <gtest/gtest.h>

#include <cmath>

#include "ops/harness.h"

namespace tessera::testing {
namespace {

constexpr int64_t kIgnore = ops::kIgnoreIndex;

// Targets in [0, v) with about a quarter set to `ignore`; transposed (non-contiguous) about
// half the time.
Tensor make_targets(CaseRng& rng, const Shape& s, int64_t v, int64_t ignore) {
  DType dt = rng.coin() ? DType::i32 : DType::i64;
  const bool transposed = s.size() >= 2 && rng.coin();
  Shape t = s;
  if (transposed) std::swap(t[0], t[t.size() - 1]);
  std::vector<int64_t> vals(static_cast<size_t>(t.numel()));
  for (auto& x : vals) x = rng.size(0, 3) == 0 ? ignore : rng.size(0, v - 1);
  Tensor out = ops::cast(from_vector<int64_t>(vals, t), dt);
  return transposed ? ops::transpose(out, 0, -1) : out;
}

// The plain-loop loss and dlogits (for gloss = 1) in f64.
struct CeRef {
  double loss = 0;
  HostTensor grad;
};

// Only the first `classes` columns (-1: all) are classes; the others get zero gradient.
CeRef ce_reference(const HostTensor& logits, const HostTensor& targets, int64_t ignore,
                   int64_t classes = -1) {
  const int64_t ld = logits.shape.back(), rows = int64_t(targets.v.size());
  const int64_t v = classes == -1 ? ld : classes;
  CeRef r{0.0, HostTensor(logits.shape)};
  int64_t valid = 0;
  for (int64_t i = 0; i < rows; ++i) valid += int64_t(targets.v[size_t(i)]) != ignore;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t t = int64_t(targets.v[size_t(i)]);
    if (t == ignore) continue;
    const double* x = logits.v.data() + i * ld;
    double m = x[0];
    for (int64_t j = 1; j < v; ++j) m = std::max(m, x[j]);
    double s = 0;
    for (int64_t j = 0; j < v; ++j) s += std::exp(x[j] - m);
    const double lse = m + std::log(s);
    r.loss += (lse - x[t]) / double(valid);
    for (int64_t j = 0; j < v; ++j)
      r.grad.v[size_t(i * ld + j)] = (std::exp(x[j] - lse) - (j == t ? 1.0 : 0.0)) / double(valid);
  }
  return r;
}

}  // namespace

TESSERA_OP_CASE(cross_entropy) {
  OpCase c;
  c.name = "cross_entropy";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    Shape lead = rng.shape(int(rng.size(0, 3)), 1, 5);
    const int64_t v = rng.size(1, 37);  // odd vocabularies: no multiple of 8 or 16
    Shape s = lead;
    s.push_back(v);
    return std::vector<Tensor>{rng.tensor(s, dt, 2.0), make_targets(rng, lead, v, kIgnore)};
  };
  c.run = [](const std::vector<Tensor>& in) { return tessera::cross_entropy(in[0], in[1]); };
  c.reference = [](const std::vector<Tensor>& in) {
    return scalar_tensor(ce_reference(HostTensor(in[0]), HostTensor(in[1]), kIgnore).loss,
                         DType::f64);
  };
  c.grad_inputs = {0};
  // Forward: one logsumexp per row (<= 37 f32 terms) averaged over <= 125 rows; the loss is
  // O(3) and its f32 round-off ~1e-6, inside the harness default of 1e-5.
  c.trials = 6;
  return c;
}

// A padded vocabulary: logits [..., v] of which only the first `classes` columns count. The
// class count travels as a 0-d i64 input so the f32 and f64 trials see the same one.
TESSERA_OP_CASE(cross_entropy_num_classes) {
  OpCase c;
  c.name = "cross_entropy_num_classes";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    Shape lead = rng.shape(int(rng.size(0, 3)), 1, 5);
    const int64_t classes = rng.size(1, 29), v = classes + rng.size(0, 9);
    Shape s = lead;
    s.push_back(v);
    return std::vector<Tensor>{rng.tensor(s, dt, 2.0), make_targets(rng, lead, classes, kIgnore),
                               scalar_tensor(double(classes), DType::i64)};
  };
  c.run = [](const std::vector<Tensor>& in) {
    return tessera::cross_entropy(in[0], in[1], kIgnore, in[2].item<int64_t>());
  };
  c.reference = [](const std::vector<Tensor>& in) {
    return scalar_tensor(
        ce_reference(HostTensor(in[0]), HostTensor(in[1]), kIgnore, in[2].item<int64_t>()).loss,
        DType::f64);
  };
  c.grad_inputs = {0};
  // As for cross_entropy: <= 29 f32 terms per logsumexp, O(3) loss, round-off ~1e-6.
  c.trials = 6;
  return c;
}

namespace {

// The kernels in `dt` against the f64 formulas: the loss, and dlogits for gloss = 1. The loss is
// O(5) and runs in f32 for both dtypes, from the very values the reference sees: one logsumexp
// of <= 130 terms per row (~1e-6 relative), so 1e-5 holds it.
void check_backward(DType dt, double rtol, double atol, uint64_t seed) {
  CaseRng rng(seed);
  const int64_t v = rng.size(90, 130);
  Shape lead{rng.size(3, 9), rng.size(3, 9)};
  Tensor logits = rng.strided_tensor(Shape{lead[0], lead[1], v}, dt, 3.0);
  Tensor targets = make_targets(rng, lead, v, kIgnore);
  CeRef ref = ce_reference(HostTensor(logits), HostTensor(targets), kIgnore);
  ops::CrossEntropyOutput f = ops::cross_entropy_forward(logits, targets);
  EXPECT_NEAR(f.loss.item<double>(), ref.loss, 1e-5);
  Tensor g =
      ops::cross_entropy_backward(logits, targets, f.lse, f.valid, scalar_tensor(1.0, DType::f32));
  EXPECT_EQ(g.dtype(), dt);
  CloseReport r = compare_close(g, ref.grad.to_tensor(), rtol, atol);
  EXPECT_TRUE(r.ok) << r.message;
}

// f32: each entry is exp(x - lse) / valid, with x - lse off by ~1 ulp of lse (~1e-6), so
// ~1e-6 relative; entries are <= 1, and tiny ones get atol 1e-7.
TEST(CrossEntropyKernels, F32BackwardMatchesF64Formula) {
  check_backward(DType::f32, 1e-5, 1e-7, 61);
}

// bf16: the gradient is computed in f32 and rounded to bf16 once (relative step 2^-8 ~ 4e-3).
TEST(CrossEntropyKernels, Bf16MatchesF64Formula) {
  check_backward(DType::bf16, 1e-2, 1e-4, 62);
}

TEST(CrossEntropyKernels, AllIgnoredGivesZeroLossAndGradient) {
  Generator gen(7);
  Tensor logits = randn(Shape{3, 7}, gen).set_requires_grad(true);
  Tensor targets = full(Shape{3}, double(kIgnore), DType::i64);
  Tensor loss = tessera::cross_entropy(logits, targets);
  EXPECT_EQ(loss.item<float>(), 0.0f);
  loss.backward();
  EXPECT_EQ(to_vector<float>(logits.grad()), std::vector<float>(21, 0.0f));
}

TEST(CrossEntropyKernels, IgnoreIndexMayBeAValidClass) {
  CaseRng rng(63);
  Tensor logits = rng.tensor(Shape{6, 5}, DType::f64);
  Tensor targets = from_vector<int64_t>({0, 2, 0, 4, 1, 0}, Shape{6});
  CeRef ref = ce_reference(HostTensor(logits), HostTensor(targets), 0);
  ops::CrossEntropyOutput f = ops::cross_entropy_forward(logits, targets, 0);
  EXPECT_EQ(f.valid.item<double>(), 3.0);
  // f64 against f64 loops: only round-off of short sums.
  EXPECT_NEAR(f.loss.item<double>(), ref.loss, 1e-12);
}

// Logits near 1e4: exp without the max shift would overflow; with it the loss stays finite and
// equals the shifted problem's (f32 spacing at 1e4 is 1e-3, so 1e-2 covers the inputs' rounding).
TEST(CrossEntropyKernels, LargeLogitsStayFinite) {
  CaseRng rng(64);
  Tensor small = rng.tensor(Shape{8, 11}, DType::f32);
  Tensor targets = make_targets(rng, Shape{8}, 11, kIgnore);
  Tensor big = ops::add(small, 1e4);
  float l_big = ops::cross_entropy_forward(big, targets).loss.item<float>();
  float l_small = ops::cross_entropy_forward(small, targets).loss.item<float>();
  EXPECT_TRUE(std::isfinite(l_big));
  EXPECT_NEAR(l_big, l_small, 1e-2);
}

TEST(CrossEntropyKernels, LossIdenticalForAnyThreadCount) {
  CaseRng rng(65);
  Tensor logits = rng.tensor(Shape{3000, 53}, DType::f32);
  Tensor targets = make_targets(rng, Shape{3000}, 53, kIgnore);
  const int saved_threads = num_threads();
  std::vector<float> losses;
  for (int t : {1, 2, 3}) {
    set_num_threads(t);
    losses.push_back(ops::cross_entropy_forward(logits, targets).loss.item<float>());
  }
  set_num_threads(saved_threads);
  EXPECT_EQ(losses[1], losses[0]);
  EXPECT_EQ(losses[2], losses[0]);
}

// 50 classes in a row of 64 (the padded-vocabulary layout): the loss is bit-identical to the
// loss over a contiguous copy of the first 50 columns (same values, same order of
// arithmetic), the real columns' gradients match the f64 formula, and the padded columns'
// gradients are exactly zero.
TEST(CrossEntropyNumClasses, PaddedColumnsAreNotClasses) {
  CaseRng rng(66);
  Tensor logits = rng.tensor(Shape{7, 9, 64}, DType::f32, 3.0);
  Tensor targets = make_targets(rng, Shape{7, 9}, 50, kIgnore);
  Tensor real = ops::contiguous(ops::narrow(logits, -1, 0, 50));
  const float padded = ops::cross_entropy_forward(logits, targets, kIgnore, 50).loss.item<float>();
  EXPECT_EQ(padded, ops::cross_entropy_forward(real, targets).loss.item<float>());

  Tensor leaf = ops::clone(logits).set_requires_grad(true);
  tessera::cross_entropy(leaf, targets, kIgnore, 50).backward();
  Tensor g = leaf.grad();
  ASSERT_EQ(g.shape(), logits.shape());
  EXPECT_EQ(to_vector<float>(ops::narrow(g, -1, 50, 14)), std::vector<float>(7 * 9 * 14, 0.0f));
  CeRef ref = ce_reference(HostTensor(logits), HostTensor(targets), kIgnore, 50);
  // Entries exp(x - lse) / valid <= 1 with ~1e-6 relative f32 round-off, as in
  // F32BackwardMatchesF64Formula.
  CloseReport r = compare_close(g, ref.grad.to_tensor(), 1e-5, 1e-7);
  EXPECT_TRUE(r.ok) << r.message;
}

// Huge values in the padded columns must not leak into the logsumexp.
TEST(CrossEntropyNumClasses, PaddedColumnsNeverEnterTheLogsumexp) {
  Tensor logits = from_vector<float>({0.f, 0.f, 1e30f, 0.f, 0.f, -1e30f}, Shape{2, 3});
  Tensor targets = from_vector<int64_t>({1, 0}, Shape{2});
  // Two equal classes per row: the loss is log 2 (f32 round-off of log: 1e-7).
  EXPECT_NEAR(ops::cross_entropy_forward(logits, targets, kIgnore, 2).loss.item<float>(),
              std::log(2.0), 1e-6);
}

TEST(CrossEntropyNumClasses, TargetsMustBeRealClasses) {
  Tensor logits = zeros(Shape{2, 3, 8});
  Tensor targets = from_vector<int64_t>({0, 1, 2, 6, 1, 0}, Shape{2, 3});
  try {
    ops::cross_entropy_forward(logits, targets, kIgnore, 5);
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* f : {"cross_entropy", "target 6", "position 3", "[0, 5)"})
      EXPECT_NE(msg.find(f), std::string::npos) << msg;
  }
  for (int64_t bad : {int64_t(0), int64_t(9), int64_t(-2)})
    EXPECT_THROW(ops::cross_entropy_forward(logits, targets, kIgnore, bad), Error) << bad;
  Tensor ok = from_vector<int64_t>({0, 1, 2, 4, 1, 0}, Shape{2, 3});
  EXPECT_NO_THROW(ops::cross_entropy_forward(logits, ok, kIgnore, 5));
  EXPECT_NO_THROW(ops::cross_entropy_forward(logits, targets, kIgnore, 8));
}

}  // namespace
}  // namespace tessera::testing
