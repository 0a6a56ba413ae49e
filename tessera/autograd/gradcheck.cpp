#include "tessera/autograd/gradcheck.h"

#include <cmath>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/reduction.h"

namespace tessera::autograd {

namespace {

// Offset (in elements, relative to t's first element) of flat row-major index i.
int64_t strided_offset(const Tensor& t, int64_t i) {
  int64_t off = 0;
  for (int d = t.dim() - 1; d >= 0; --d) {
    int64_t n = t.shape()[d];
    off += (i % n) * t.strides()[d];
    i /= n;
  }
  return off;
}

double projected(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const Tensor& w) {
  NoGradGuard no_grad;
  Tensor out = fn(inputs);
  return ops::sum(ops::mul(ops::cast(out, DType::f64), w)).item<double>();
}

}  // namespace

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& opt) {
  GradcheckResult result;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = inputs[k];
    if (t.defined() && t.requires_grad()) {
      TESSERA_CHECK(t.dtype() == DType::f64 && t.device().is_cpu(), "gradcheck: input ", k, " (",
                    t.describe(), ") must be f64 on the cpu");
      TESSERA_CHECK(t.is_leaf(), "gradcheck: input ", k, " must be a leaf");
      t.set_grad(Tensor());
    }
  }

  // Analytic gradients of sum(out * w).
  Tensor out = fn(inputs);
  TESSERA_CHECK(out.requires_grad(), "gradcheck: the output does not require grad");
  Generator gen(opt.seed);
  Tensor w = randn(out.shape(), gen, DType::f64);
  // d sum(out * w) / d out = w.
  autograd::backward({out}, {ops::cast(w, out.dtype())}, false);

  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = inputs[k];
    if (!t.defined() || !t.requires_grad()) continue;
    Tensor analytic = t.grad();
    std::vector<double> a = analytic.defined() ? to_vector<double>(analytic)
                                               : std::vector<double>(size_t(t.numel()), 0.0);
    double* base = static_cast<double*>(t.data_ptr("gradcheck"));
    for (int64_t i = 0; i < t.numel(); ++i) {
      double* p = base + strided_offset(t, i);
      double orig = *p;
      *p = orig + opt.eps;
      double up = projected(fn, inputs, w);
      *p = orig - opt.eps;
      double down = projected(fn, inputs, w);
      *p = orig;
      double numeric = (up - down) / (2 * opt.eps);
      double err = std::abs(numeric - a[size_t(i)]);
      result.max_abs_error = std::max(result.max_abs_error, err);
      if (!(err <= opt.atol + opt.rtol * std::abs(numeric)) && result.ok) {
        result.ok = false;
        result.message =
            str_cat("gradcheck: input ", k, " (", t.describe(), ") element ", i, ": analytic ",
                    a[size_t(i)], " vs numeric ", numeric, " (abs error ", err, ", atol ", opt.atol,
                    ", rtol ", opt.rtol, ")");
      }
    }
  }
  return result;
}

}  // namespace tessera::autograd
