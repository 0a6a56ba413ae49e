#include "tessera/core/ops/loss.h"

#include "tessera/core/detail/op_scope.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/detail/op_utils.h"

namespace tessera::ops {

using detail::backend;
using detail::check_defined;
using detail::naming_indices;

namespace {

// loss, lse and valid are f32, or f64 for f64 logits (so gradcheck runs in f64 end to end).
DType stats_dtype(DType dtype) {
  return dtype == DType::f64 ? DType::f64 : DType::f32;
}

// Checks logits [..., V] and targets [...]; returns them as [N, num_classes] (the first
// num_classes columns of contiguous [N, V], a view with row stride V) and contiguous [N].
struct Flat {
  Tensor full;    // [N, V], contiguous
  Tensor logits;  // [N, num_classes] view of full
  Tensor targets;
};

Flat flatten_inputs(const char* op, const Tensor& logits, const Tensor& targets,
                    int64_t num_classes) {
  check_defined(op, logits, "logits");
  check_defined(op, targets, "targets");
  detail::check_floating(op, logits, "logits");
  detail::check_integer(op, targets, "targets");
  detail::check_same_device(op, {&logits, &targets});
  TESSERA_CHECK(logits.dim() >= 1 && logits.shape().back() > 0, op,
                ": logits need a non-empty last (class) dim, got ", logits.describe());
  Shape lead = logits.shape();
  lead.resize(logits.dim() - 1);
  TESSERA_CHECK(targets.shape() == lead, op, ": targets ", targets.describe(),
                " must have the leading shape ", lead, " of logits ", logits.describe());
  const int64_t v = logits.shape().back(), n = logits.numel() / v;
  TESSERA_CHECK(num_classes == -1 || (num_classes >= 1 && num_classes <= v), op,
                ": num_classes must be -1 (all) or in [1, ", v, "] for logits ", logits.describe(),
                ", got ", num_classes);
  Tensor full = reshape(contiguous(logits), Shape{n, v});
  const int64_t classes = num_classes == -1 ? v : num_classes;
  return {full, classes == v ? full : narrow(full, 1, 0, classes),
          reshape(contiguous(targets), Shape{n})};
}

Tensor check_scalar(const char* op, const Tensor& t, DType dtype, const char* what) {
  check_defined(op, t, what);
  TESSERA_CHECK(t.numel() == 1, op, ": ", what, " must hold one element, got ", t.describe());
  return reshape(contiguous(cast(t, dtype)), Shape{});
}

}  // namespace

CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                         int64_t ignore_index, int64_t num_classes) {
  const OpScope scope("cross_entropy_forward");
  Flat f = flatten_inputs("cross_entropy", logits, targets, num_classes);
  const DType sd = stats_dtype(logits.dtype());
  const int64_t n = f.logits.shape()[0];
  CrossEntropyOutput out{empty(Shape{}, sd, logits.device()), empty(Shape{n}, sd, logits.device()),
                         empty(Shape{}, sd, logits.device())};
  if (n == 0) {  // no rows: nothing counts, and the loss is 0 by definition
    fill_(out.loss, 0.0);
    fill_(out.valid, 0.0);
  } else {
    naming_indices(targets, "targets", [&] {
      backend(logits).cross_entropy_forward(f.logits, f.targets, ignore_index, out.loss, out.lse,
                                            out.valid);
    });
  }
  return out;
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              const Tensor& valid, const Tensor& gloss, int64_t ignore_index,
                              int64_t num_classes) {
  const OpScope scope("cross_entropy_backward");
  const char* op = "cross_entropy_backward";
  Flat f = flatten_inputs(op, logits, targets, num_classes);
  const DType sd = stats_dtype(logits.dtype());
  const int64_t n = f.logits.shape()[0], classes = f.logits.shape()[1];
  check_defined(op, lse, "lse");
  detail::check_same_device(op, {&logits, &lse, &valid, &gloss});
  TESSERA_CHECK(lse.shape() == Shape{n} && lse.dtype() == sd, op, ": lse must be ", dtype_name(sd),
                "[", n, "] for logits ", logits.describe(), ", got ", lse.describe());
  Tensor count = check_scalar(op, valid, sd, "valid");
  Tensor g = check_scalar(op, gloss, sd, "gradient");
  Tensor glogits = empty(logits.shape(), logits.dtype(), logits.device());
  Tensor g2 = reshape(glogits, f.full.shape());
  if (classes < g2.size(1)) zero_(narrow(g2, 1, classes, g2.size(1) - classes));
  if (n > 0)
    naming_indices(targets, "targets", [&] {
      backend(logits).cross_entropy_backward(f.logits, f.targets, contiguous(lse), g, count,
                                             ignore_index, narrow(g2, 1, 0, classes));
    });
  return glogits;
}

}  // namespace tessera::ops
