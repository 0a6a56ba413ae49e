#include "tessera/parallel/data/powersgd.h"

#include <algorithm>
#include <cmath>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/matmul.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/random.h"
#include "tessera/parallel/data/grad_compression.h"

namespace tessera::parallel {

void orthonormalize_columns(const Tensor& p) {
  TESSERA_CHECK(p.dim() == 2 && p.dtype() == DType::f32 && p.is_contiguous(),
                "orthonormalize_columns: expected a contiguous f32 matrix, got ", p.describe());
  const Tensor host = ops::contiguous(ops::to(p, Device::cpu()));
  const int64_t n = p.size(0), r = p.size(1);
  float* a = static_cast<float*>(host.data_ptr("orthonormalize_columns"));
  std::vector<double> column(static_cast<size_t>(n));
  for (int64_t j = 0; j < r; ++j) {
    for (int64_t i = 0; i < n; ++i) column[size_t(i)] = a[i * r + j];
    for (int64_t k = 0; k < j; ++k) {  // the earlier columns are orthonormal already
      double dot = 0;
      for (int64_t i = 0; i < n; ++i) dot += column[size_t(i)] * double(a[i * r + k]);
      for (int64_t i = 0; i < n; ++i) column[size_t(i)] -= dot * double(a[i * r + k]);
    }
    double norm = 0;
    for (int64_t i = 0; i < n; ++i) norm += column[size_t(i)] * column[size_t(i)];
    norm = std::sqrt(norm);
    const double inv = norm > 0 ? 1.0 / norm : 0.0;
    for (int64_t i = 0; i < n; ++i) a[i * r + j] = float(column[size_t(i)] * inv);
  }
  if (!host.is_same(p)) ops::copy_(p, host);
}

PowerSgd::PowerSgd(const FlatLayout& layout, int rank, uint64_t seed)
    : layout_(layout), rank_(rank) {
  TESSERA_CHECK(rank >= 1, "PowerSGD: the rank must be >= 1, got ", rank);
  NoGradGuard no_grad;
  Generator gen(seed);
  const Device device = layout.params().front().tensor.device();
  for (const auto& bucket : layout.buckets()) {
    Plan plan;
    const DType dtype = layout.spaces()[size_t(bucket.space)].dtype;
    for (int param : bucket.params) {
      const auto& p = layout.params()[size_t(param)];
      const int64_t n = p.tensor.dim() >= 2 ? p.tensor.size(0) : 1;
      const int64_t m = p.tensor.numel() / std::max<int64_t>(n, 1);
      if (dtype == DType::f32 && p.tensor.dim() >= 2 && powersgd_compresses(n, m, rank)) {
        Matrix x;
        x.param = param;
        x.n = n;
        x.m = m;
        x.offset = p.offset;
        x.p_offset = plan.p_numel;
        x.q_offset = plan.q_numel;
        x.residual = zeros(Shape{n, m}, DType::f32, device);
        plan.p_numel += n * rank;
        plan.q_numel += m * rank;
        plan.matrices.push_back(std::move(x));
      } else {
        plan.plain.push_back({p.offset, p.tensor.numel(), 0});
      }
    }
    if (!plan.matrices.empty()) {
      for (Plain& u : plan.plain) {
        u.p_offset = plan.p_numel;
        plan.p_numel += u.numel;
      }
      plan.p = empty(Shape{plan.p_numel}, DType::f32, device);
      plan.q = empty(Shape{plan.q_numel}, DType::f32, device);
      for (const Matrix& x : plan.matrices)  // the same draws on every rank: same layout, seed
        ops::copy_(q_view(plan, x), randn(Shape{x.m, rank}, gen, DType::f32, device));
    }
    plans_.push_back(std::move(plan));
  }
}

Tensor PowerSgd::matrix_view(const Tensor& grad, const Matrix& x) const {
  return ops::reshape(ops::narrow(grad, 0, x.offset, x.n * x.m), {x.n, x.m});
}

Tensor PowerSgd::p_view(const Plan& plan, const Matrix& x) const {
  return ops::reshape(ops::narrow(plan.p, 0, x.p_offset, x.n * rank_), {x.n, rank_});
}

Tensor PowerSgd::q_view(const Plan& plan, const Matrix& x) const {
  return ops::reshape(ops::narrow(plan.q, 0, x.q_offset, x.m * rank_), {x.m, rank_});
}

Tensor PowerSgd::begin(int b, const Tensor& grad) {
  NoGradGuard no_grad;
  Plan& plan = plans_[size_t(b)];
  TESSERA_ASSERT(!plan.matrices.empty(), "PowerSGD: bucket ", b, " has nothing to compress");
  for (const Matrix& x : plan.matrices) {
    const Tensor m = matrix_view(grad, x);
    ops::add_(m, x.residual);  // M = g + e
    ops::matmul_out(p_view(plan, x), m, q_view(plan, x));
  }
  for (const Plain& u : plan.plain)
    ops::copy_(ops::narrow(plan.p, 0, u.p_offset, u.numel), ops::narrow(grad, 0, u.offset, u.numel));
  return plan.p;
}

Tensor PowerSgd::middle(int b, const Tensor& grad) {
  NoGradGuard no_grad;
  Plan& plan = plans_[size_t(b)];
  for (const Matrix& x : plan.matrices) {
    const Tensor p = p_view(plan, x);
    orthonormalize_columns(p);
    ops::matmul_out(q_view(plan, x), matrix_view(grad, x), p, /*trans_a=*/true);
  }
  for (const Plain& u : plan.plain)
    ops::copy_(ops::narrow(grad, 0, u.offset, u.numel), ops::narrow(plan.p, 0, u.p_offset, u.numel));
  return plan.q;
}

void PowerSgd::end(int b, const Tensor& grad) {
  NoGradGuard no_grad;
  Plan& plan = plans_[size_t(b)];
  for (const Matrix& x : plan.matrices) {
    const Tensor m = matrix_view(grad, x), p = p_view(plan, x), q = q_view(plan, x);
    ops::copy_(x.residual, m);
    ops::matmul_out(x.residual, p, q, false, /*trans_b=*/true, -1.0f, 1.0f);  // e = M - P Q^T
    ops::matmul_out(m, p, q, false, /*trans_b=*/true);                        // g = P Q^T
  }
}

Tensor PowerSgd::residual(int param) const {
  const auto& p = layout_.params()[size_t(param)];
  for (const Matrix& x : plans_[size_t(p.bucket)].matrices)
    if (x.param == param) return x.residual;
  return Tensor();
}

int64_t PowerSgd::held_bytes() const {
  int64_t bytes = 0;
  for (const Plan& plan : plans_) {
    if (plan.p.defined()) bytes += int64_t(plan.p.nbytes() + plan.q.nbytes());
    for (const Matrix& x : plan.matrices) bytes += int64_t(x.residual.nbytes());
  }
  return bytes;
}

}  // namespace tessera::parallel
