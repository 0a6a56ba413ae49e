#include "tessera/core/ops/norm.h"

#include "tessera/core/detail/op_scope.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/detail/op_utils.h"

namespace tessera::ops {

using detail::backend;
using detail::check_defined;

namespace {

// x as the contiguous [rows, C] the backend expects (a view unless x is not contiguous).
Tensor as_rows(const Tensor& x) {
  const int64_t n = x.shape().back();
  return reshape(contiguous(x), Shape{x.numel() / n, n});
}

DType stats_dtype(DType dtype) {
  return dtype == DType::f64 ? DType::f64 : DType::f32;
}

void check_input(const char* op, const Tensor& x) {
  check_defined(op, x);
  detail::check_floating(op, x);
  TESSERA_CHECK(x.dim() >= 1 && x.shape().back() > 0, op,
                ": input needs a non-empty last dim to normalize over, got ", x.describe());
}

// weight / bias: floating [C], on x's device; they are cast to x's dtype before use.
Tensor check_param(const char* op, const Tensor& p, const Tensor& x, const char* what) {
  check_defined(op, p, what);
  detail::check_floating(op, p, what);
  detail::check_same_device(op, {&x, &p});
  const int64_t n = x.shape().back();
  TESSERA_CHECK(p.shape() == Shape{n}, op, ": ", what, " must have shape [", n,
                "] to match the last dim of input ", x.describe(), ", got ", p.describe());
  return contiguous(cast(p, x.dtype()));
}

// The saved per-row statistic of a backward pass: stats dtype, [rows], on x's device.
Tensor check_stat(const char* op, const Tensor& s, const Tensor& x, const char* what) {
  check_defined(op, s, what);
  detail::check_same_device(op, {&x, &s});
  const int64_t rows = x.numel() / x.shape().back();
  TESSERA_CHECK(s.shape() == Shape{rows} && s.dtype() == stats_dtype(x.dtype()), op, ": ", what,
                " must be ", dtype_name(stats_dtype(x.dtype())), "[", rows, "] for input ",
                x.describe(), ", got ", s.describe());
  return contiguous(s);
}

Tensor check_grad(const char* op, const Tensor& gy, const Tensor& x) {
  check_defined(op, gy, "gradient");
  detail::check_same_device(op, {&x, &gy});
  TESSERA_CHECK(gy.shape() == x.shape(), op, ": gradient ", gy.describe(), " does not match input ",
                x.describe());
  return as_rows(cast(gy, x.dtype()));
}

NormGrads alloc_grads(const Tensor& x, bool need_gw, bool need_gb) {
  const int64_t n = x.shape().back();
  const bool no_rows = x.numel() == 0;  // the row sums are then zero, not uninitialised
  auto param_grad = [&](bool need) {
    if (!need) return Tensor();
    return no_rows ? zeros(Shape{n}, x.dtype(), x.device())
                   : empty(Shape{n}, x.dtype(), x.device());
  };
  return {empty(x.shape(), x.dtype(), x.device()), param_grad(need_gw), param_grad(need_gb)};
}

}  // namespace

LayerNormOutput layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  double eps) {
  const OpScope scope("layernorm_forward");
  check_input("layernorm", x);
  Tensor w = check_param("layernorm", weight, x, "weight");
  Tensor b = bias.defined() ? check_param("layernorm", bias, x, "bias") : Tensor();
  TESSERA_CHECK(eps >= 0, "layernorm: eps must be >= 0, got ", eps);
  Tensor x2 = as_rows(x);
  const int64_t rows = x2.shape()[0];
  LayerNormOutput out{empty(x.shape(), x.dtype(), x.device()),
                      empty(Shape{rows}, stats_dtype(x.dtype()), x.device()),
                      empty(Shape{rows}, stats_dtype(x.dtype()), x.device())};
  if (rows > 0)
    backend(x).layernorm_forward(x2, w, b, eps, reshape(out.y, x2.shape()), out.mean, out.rstd);
  return out;
}

NormGrads layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                             const Tensor& rstd, const Tensor& gy, bool need_gw, bool need_gb) {
  const OpScope scope("layernorm_backward");
  const char* op = "layernorm_backward";
  check_input(op, x);
  Tensor w = check_param(op, weight, x, "weight");
  Tensor m = check_stat(op, mean, x, "mean");
  Tensor r = check_stat(op, rstd, x, "rstd");
  Tensor g2 = check_grad(op, gy, x);
  NormGrads grads = alloc_grads(x, need_gw, need_gb);
  if (x.numel() > 0) {
    Tensor x2 = as_rows(x);
    backend(x).layernorm_backward(x2, w, m, r, g2, reshape(grads.gx, x2.shape()), grads.gw,
                                  grads.gb);
  }
  return grads;
}

RMSNormOutput rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps) {
  const OpScope scope("rmsnorm_forward");
  check_input("rmsnorm", x);
  Tensor w = check_param("rmsnorm", weight, x, "weight");
  TESSERA_CHECK(eps >= 0, "rmsnorm: eps must be >= 0, got ", eps);
  Tensor x2 = as_rows(x);
  const int64_t rows = x2.shape()[0];
  RMSNormOutput out{empty(x.shape(), x.dtype(), x.device()),
                    empty(Shape{rows}, stats_dtype(x.dtype()), x.device())};
  if (rows > 0) backend(x).rmsnorm_forward(x2, w, eps, reshape(out.y, x2.shape()), out.rstd);
  return out;
}

NormGrads rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                           const Tensor& gy, bool need_gw) {
  const OpScope scope("rmsnorm_backward");
  const char* op = "rmsnorm_backward";
  check_input(op, x);
  Tensor w = check_param(op, weight, x, "weight");
  Tensor r = check_stat(op, rstd, x, "rstd");
  Tensor g2 = check_grad(op, gy, x);
  NormGrads grads = alloc_grads(x, need_gw, false);
  if (x.numel() > 0) {
    Tensor x2 = as_rows(x);
    backend(x).rmsnorm_backward(x2, w, r, g2, reshape(grads.gx, x2.shape()), grads.gw);
  }
  return grads;
}

}  // namespace tessera::ops
