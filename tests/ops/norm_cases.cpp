// Harness cases for layernorm and rmsnorm, plus checks the harness does not make: the f32 and
// bf16 kernels' backward passes against plain-loop f64 formulas, layernorm without a bias,
// statistics that survive a large mean, and gw/gb bits independent of the thread count.

#include <gtest/gtest.h>

#include <cmath>

#include "ops/harness.h"

namespace tessera::testing {
namespace {

constexpr double kLnEps = 1e-5;
constexpr double kRmsEps = 1e-6;

// The plain-loop forward and backward of both norms in f64, over rows of the last dim.
// w and b may be empty (b is ignored for rmsnorm).
struct NormRef {
  HostTensor y, gx, gw, gb;
};

NormRef norm_reference(const HostTensor& x, const HostTensor& w, const HostTensor& b,
                       const HostTensor* gy, bool rms, double eps) {
  const int64_t n = x.shape.back(), rows = int64_t(x.v.size()) / n;
  NormRef r{HostTensor(x.shape), HostTensor(x.shape), HostTensor(Shape{n}), HostTensor(Shape{n})};
  for (int64_t i = 0; i < rows; ++i) {
    const double* xr = x.v.data() + i * n;
    double mean = 0, var = 0;
    if (!rms) {
      for (int64_t j = 0; j < n; ++j) mean += xr[j] / double(n);
    }
    for (int64_t j = 0; j < n; ++j) var += (xr[j] - mean) * (xr[j] - mean) / double(n);
    const double rstd = 1 / std::sqrt(var + eps);
    std::vector<double> xhat(static_cast<size_t>(n)), g(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      xhat[size_t(j)] = (xr[j] - mean) * rstd;
      double bias = (!rms && !b.v.empty()) ? b.v[size_t(j)] : 0.0;
      r.y.v[size_t(i * n + j)] = xhat[size_t(j)] * w.v[size_t(j)] + bias;
    }
    if (gy == nullptr) continue;
    double sum_g = 0, sum_gx = 0;
    for (int64_t j = 0; j < n; ++j) {
      double gyj = gy->v[size_t(i * n + j)];
      g[size_t(j)] = gyj * w.v[size_t(j)];
      sum_g += g[size_t(j)];
      sum_gx += g[size_t(j)] * xhat[size_t(j)];
      r.gw.v[size_t(j)] += gyj * xhat[size_t(j)];
      r.gb.v[size_t(j)] += gyj;
    }
    for (int64_t j = 0; j < n; ++j) {
      double centred = rms ? g[size_t(j)] : g[size_t(j)] - sum_g / double(n);
      r.gx.v[size_t(i * n + j)] = rstd * (centred - xhat[size_t(j)] * sum_gx / double(n));
    }
  }
  return r;
}

// The values of x in every other element of a buffer twice as wide: strided in the last dim,
// the layout the norms must copy.
Tensor strided_copy(const Tensor& x) {
  Shape wide = x.shape();
  wide[wide.size() - 1] = 2 * x.shape().back() + 1;
  Tensor view = ops::slice(zeros(wide, x.dtype()), -1, 1, wide.back(), 2);
  ops::copy_(view, x);
  return view;
}

// x [lead..., C] with an offset mean, so centring matters; weight [C] and bias [C].
std::vector<Tensor> norm_inputs(CaseRng& rng, DType dt, bool with_bias) {
  Shape s = rng.shape(int(rng.size(0, 3)), 1, 6);
  s.push_back(rng.size(1, 37));  // odd sizes: no multiple of a vector width
  const int64_t c = s.back();
  Tensor x = ops::add(rng.tensor(s, dt, 1.5), 2.0);
  if (rng.coin()) x = strided_copy(x);
  std::vector<Tensor> in{x, rng.tensor(Shape{c}, dt)};
  if (with_bias) in.push_back(rng.tensor(Shape{c}, dt));
  return in;
}

OpCase norm_case(bool rms) {
  OpCase c;
  c.name = rms ? "rmsnorm" : "layernorm";
  c.make_inputs = [rms](CaseRng& rng, DType dt) { return norm_inputs(rng, dt, !rms); };
  if (rms) {
    c.run = [](const std::vector<Tensor>& in) { return tessera::rmsnorm(in[0], in[1], kRmsEps); };
  } else {
    c.run = [](const std::vector<Tensor>& in) {
      return tessera::layernorm(in[0], in[1], in[2], kLnEps);
    };
  }
  c.reference = [rms](const std::vector<Tensor>& in) {
    HostTensor b = rms ? HostTensor(Shape{0}) : HostTensor(in[2]);
    return norm_reference(HostTensor(in[0]), HostTensor(in[1]), b, nullptr, rms,
                          rms ? kRmsEps : kLnEps)
        .y.to_tensor();
  };
  c.grad_inputs = rms ? std::vector<int>{0, 1} : std::vector<int>{0, 1, 2};
  // Forward: outputs are O(5) and formed from row sums of <= 37 f32 terms (~1e-6 relative), so
  // the harness default of 1e-5 holds.
  return c;
}

}  // namespace

TESSERA_OP_CASE(layernorm) {
  return norm_case(false);
}
TESSERA_OP_CASE(rmsnorm) {
  return norm_case(true);
}

namespace {

// Runs the backward kernel of one norm in `dt` and checks gx, gw (and gb) against the f64
// plain-loop formulas, within rtol/atol.
void check_backward(bool rms, DType dt, double rtol, double atol, uint64_t seed) {
  CaseRng rng(seed);
  Shape s{rng.size(20, 70), rng.size(1, 4), rng.size(17, 67)};  // up to 280 rows
  const int64_t c = s.back();
  Tensor x = strided_copy(ops::add(rng.tensor(s, dt), 1.0));
  Tensor w = rng.tensor(Shape{c}, dt), b = rng.tensor(Shape{c}, dt);
  Tensor gy = rng.tensor(s, dt);
  HostTensor hgy(gy);
  NormRef ref =
      norm_reference(HostTensor(x), HostTensor(w), rms ? HostTensor(Shape{0}) : HostTensor(b), &hgy,
                     rms, rms ? kRmsEps : kLnEps);
  ops::NormGrads g;
  if (rms) {
    ops::RMSNormOutput f = ops::rmsnorm_forward(x, w, kRmsEps);
    EXPECT_TRUE(compare_close(f.y, ref.y.to_tensor(), rtol, atol).ok);
    g = ops::rmsnorm_backward(x, w, f.rstd, gy, true);
  } else {
    ops::LayerNormOutput f = ops::layernorm_forward(x, w, b, kLnEps);
    EXPECT_TRUE(compare_close(f.y, ref.y.to_tensor(), rtol, atol).ok);
    g = ops::layernorm_backward(x, w, f.mean, f.rstd, gy, true, true);
    CloseReport rb = compare_close(g.gb, ref.gb.to_tensor(), rtol, atol);
    EXPECT_TRUE(rb.ok) << "gb: " << rb.message;
  }
  EXPECT_EQ(g.gx.dtype(), dt);
  CloseReport rx = compare_close(g.gx, ref.gx.to_tensor(), rtol, atol);
  EXPECT_TRUE(rx.ok) << "gx: " << rx.message;
  CloseReport rw = compare_close(g.gw, ref.gw.to_tensor(), rtol, atol);
  EXPECT_TRUE(rw.ok) << "gw: " << rw.message;
}

// f32: row sums of <= 67 terms and gw/gb sums over <= 280 rows, each ~1e-6 relative in f32;
// 1e-4 leaves a wide margin while a wrong formula is off by O(1).
TEST(NormKernels, F32BackwardMatchesF64Formulas) {
  check_backward(false, DType::f32, 1e-4, 1e-4, 11);
  check_backward(true, DType::f32, 1e-4, 1e-4, 12);
}

// bf16: inputs and outputs carry 8 significant bits (relative step 2^-8 ~ 4e-3), and gw/gb are
// sums of up to 280 O(1) terms rounded once at the end (|sum| ~ 20, step ~ 0.1); the math runs in
// f32, so errors stay near one bf16 rounding of each result.
TEST(NormKernels, Bf16MatchesF64Formulas) {
  check_backward(false, DType::bf16, 2e-2, 1.5e-1, 13);
  check_backward(true, DType::bf16, 2e-2, 1.5e-1, 14);
}

TEST(NormKernels, LayerNormWithoutBias) {
  CaseRng rng(21);
  Tensor x = rng.strided_tensor(Shape{3, 5, 9}, DType::f64).set_requires_grad(true);
  Tensor w = rng.tensor(Shape{9}, DType::f64).set_requires_grad(true);
  auto fn = [](const std::vector<Tensor>& in) {
    return tessera::layernorm(in[0], in[1], Tensor(), kLnEps);
  };
  autograd::GradcheckResult r = autograd::gradcheck(fn, {x, w});
  EXPECT_TRUE(r.ok) << r.message;
  Tensor y = ops::layernorm_forward(x, w, Tensor(), kLnEps).y;
  NormRef ref =
      norm_reference(HostTensor(x), HostTensor(w), HostTensor(Shape{0}), nullptr, false, kLnEps);
  // f64 against f64 loops: only round-off of short sums.
  EXPECT_TRUE(compare_close(y, ref.y.to_tensor(), 1e-12, 1e-12).ok);
}

// Mixed precision: bf16 activations with an f32 weight. The weight is cast to x's dtype, y stays
// bf16, and the weight's gradient comes back in the weight's own dtype and shape.
TEST(NormKernels, WeightOfAnotherDtypeIsCast) {
  CaseRng rng(22);
  Tensor x = rng.tensor(Shape{4, 8}, DType::bf16).set_requires_grad(true);
  Tensor w = rng.tensor(Shape{8}, DType::f32).set_requires_grad(true);
  Tensor b = rng.tensor(Shape{8}, DType::f32).set_requires_grad(true);
  Tensor y = tessera::layernorm(x, w, b);
  EXPECT_EQ(y.dtype(), DType::bf16);
  tessera::sum(y).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  EXPECT_EQ(w.grad().shape(), (Shape{8}));
  // d sum(y) / d b = number of rows, exactly.
  EXPECT_EQ(to_vector<float>(b.grad()), std::vector<float>(8, 4.0f));
  EXPECT_EQ(x.grad().dtype(), DType::bf16);
}

// Rows with |mean| = 1e4 >> std = 1: the one-pass E[x^2] - E[x]^2 in f32 loses the variance
// entirely (f32 spacing near 1e8 is 8), while two passes keep y within f32 round-off of the
// mean (1e4 * 6e-8 * a few) ~ 1e-3.
TEST(NormKernels, StatisticsSurviveALargeMean) {
  CaseRng rng(31);
  Tensor x = ops::add(rng.tensor(Shape{16, 64}, DType::f32), 1e4);
  Tensor w = ones(Shape{64});
  Tensor y = ops::layernorm_forward(x, w, Tensor(), kLnEps).y;
  NormRef ref =
      norm_reference(HostTensor(x), HostTensor(w), HostTensor(Shape{0}), nullptr, false, kLnEps);
  CloseReport r = compare_close(y, ref.y.to_tensor(), 0.0, 5e-3);
  EXPECT_TRUE(r.ok) << r.message;
}

// gw/gb are chunked by row count alone, so the bits cannot depend on the thread count.
TEST(NormKernels, ParamGradsIdenticalForAnyThreadCount) {
  CaseRng rng(41);
  Tensor x = rng.tensor(Shape{1000, 67}, DType::f32), gy = rng.tensor(Shape{1000, 67}, DType::f32);
  Tensor w = rng.tensor(Shape{67}, DType::f32), b = rng.tensor(Shape{67}, DType::f32);
  const int saved_threads = num_threads();
  std::vector<ops::NormGrads> ln, rms;
  for (int t : {1, 2, 3}) {
    set_num_threads(t);
    ops::LayerNormOutput f = ops::layernorm_forward(x, w, b, kLnEps);
    ln.push_back(ops::layernorm_backward(x, w, f.mean, f.rstd, gy, true, true));
    ops::RMSNormOutput fr = ops::rmsnorm_forward(x, w, kRmsEps);
    rms.push_back(ops::rmsnorm_backward(x, w, fr.rstd, gy, true));
  }
  set_num_threads(saved_threads);
  for (size_t i = 1; i < ln.size(); ++i) {
    EXPECT_TRUE(equal(ln[i].gw, ln[0].gw)) << "layernorm gw, thread count " << i + 1;
    EXPECT_TRUE(equal(ln[i].gb, ln[0].gb)) << "layernorm gb, thread count " << i + 1;
    EXPECT_TRUE(equal(ln[i].gx, ln[0].gx)) << "layernorm gx, thread count " << i + 1;
    EXPECT_TRUE(equal(rms[i].gw, rms[0].gw)) << "rmsnorm gw, thread count " << i + 1;
  }
}

}  // namespace
}  // namespace tessera::testing
