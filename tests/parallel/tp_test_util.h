#pragma once
// Shared pieces of the tensor-parallel tests: the tp group of this rank, random full weights,
// and comparisons that report the worst element.
//
// Every rank also runs the single-process twin itself, on the same inputs: the twin is
// deterministic, so each rank compares against identical reference values.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "parallel/rank_test.h"
#include "tessera/nn/nn.h"
#include "tessera/parallel/mesh.h"
#include "tessera/parallel/tp/detail/full_state.h"
#include "tessera/parallel/tp/tensor_parallel.h"
#include "tessera/tessera.h"

namespace tessera::parallel::testing {

// A tensor-parallel group of `tp` consecutive world ranks (dp = world / tp).
inline std::shared_ptr<tp::TensorParallel> make_tp(int tp, bool sequence_parallel) {
  auto world = test_world();
  auto mesh = std::make_shared<DeviceMesh>(world, MeshShape{world->size() / tp, 1, tp});
  return tp::TensorParallel::from_mesh(mesh, sequence_parallel);
}

// A tensor drawn N(0, std) from `seed`, the same on every rank.
inline Tensor random_tensor(const Shape& shape, uint64_t seed, double std = 1.0,
                            DType dtype = DType::f32) {
  Generator gen(seed, 0);
  return randn(shape, gen, dtype, Device::cpu(), 0.0, std);
}

// Replaces every parameter of `model` with random values (biases and norm weights included,
// so that sharding them is tested), the same on every rank.
inline void randomize(nn::Module& model, uint64_t seed) {
  NoGradGuard no_grad;
  uint64_t k = seed;
  for (auto& [name, t] : model.named_parameters())
    ops::copy_(t, random_tensor(t.shape(), ++k, 0.3, t.dtype()));
}

// A leaf that requires grad, holding a copy of x.
inline Tensor leaf(const Tensor& x) {
  Tensor l = ops::clone(x);
  l.set_requires_grad(true);
  return l;
}

// EXPECT got ~= want within |got - want| <= atol + rtol |want|, naming `what` and the worst
// element.
inline void expect_close(const Tensor& got, const Tensor& want, double rtol, double atol,
                         const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": undefined";
  ASSERT_TRUE(want.defined()) << what << ": reference undefined";
  ASSERT_EQ(got.shape(), want.shape()) << what;
  CloseReport r = compare_close(got, want, rtol, atol);
  EXPECT_TRUE(r.ok) << what << ": " << r.message << " (max abs error " << r.max_abs_error << ")";
}

// How far a tensor-parallel result may be from its single-process twin: |got - want| <=
// rtol |want| + scaled max|want|. The scaled term is for entries that are sums with
// cancellation: reordering a sum of n terms changes it by up to ~n u max|term| (u the unit
// roundoff) whatever the size of the result, and the terms are at most the size of the
// tensor's largest entries.
struct Tolerance {
  double rtol, scaled;
};
// f64: u = 1.1e-16 and n <= ~128 terms: 1.4e-14 of the largest entry.
constexpr Tolerance kF64{1e-12, 1e-13};
// f32: u = 6e-8 and n <= ~128 terms: 7.6e-6 of the largest entry.
constexpr Tolerance kF32{1e-5, 1e-5};

inline Tolerance tolerance_for(DType dtype) {
  return dtype == DType::f64 ? kF64 : kF32;
}

// The largest |x|.
inline double max_abs(const Tensor& x) {
  double m = 0;
  for (double v : to_vector<double>(ops::cast(x, DType::f64))) m = std::max(m, std::abs(v));
  return m;
}

// expect_close with tol (see Tolerance).
inline void expect_close(const Tensor& got, const Tensor& want, Tolerance tol,
                         const std::string& what) {
  ASSERT_TRUE(want.defined()) << what << ": reference undefined";
  expect_close(got, want, tol.rtol, tol.scaled * max_abs(want), what);
}

// The q, k and v parts of a c_attn bias (or its gradient) laid out as [q heads, k heads,
// v heads] with n_head query and n_kv_head key/value heads of head_dim.
struct QkvParts {
  Tensor q, k, v;
};
inline QkvParts split_qkv(const Tensor& b, int64_t n_head, int64_t n_kv_head, int64_t head_dim) {
  const int64_t q = n_head * head_dim, kv = n_kv_head * head_dim;
  return {ops::narrow(b, 0, 0, q), ops::narrow(b, 0, q, kv), ops::narrow(b, 0, q + kv, kv)};
}

// The key-projection bias b_k has a zero gradient: adding q . b_k to every score of a softmax
// row changes no probability. What the backward pass computes for it is rounding noise: the sum
// over the B T key positions of the key gradients, each itself a sum over the T query positions
// of score gradients times queries, so each carries ~T roundings of terms the size of the
// query-bias gradient's (the same score gradients times keys). Bound: 2 u B T T max|g_bq|;
// measured at most 0.37 of it (f32 attention layer, tp = 2).
inline void expect_key_bias_grad_zero(const Tensor& g_k, const Tensor& g_q, int64_t batch,
                                      int64_t seq, const std::string& what) {
  const double u = g_k.dtype() == DType::f64 ? 1.1e-16 : 6e-8;
  const double bound = 2 * u * double(batch * seq * seq) * max_abs(g_q);
  EXPECT_LE(max_abs(g_k), bound) << what << ": the key-bias gradient should be rounding noise";
}

// Bitwise equality, for the cases where the order of every reduction is unchanged.
inline void expect_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined() && want.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_TRUE(equal(ops::contiguous(got), ops::contiguous(want)))
      << what << ": not bit-identical; " << compare_close(got, want, 0, 0).message;
}

}  // namespace tessera::parallel::testing
