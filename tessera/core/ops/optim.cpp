#include "tessera/core/ops/optim.h"

#include <cmath>

#include "tessera/core/detail/op_scope.h"
#include "tessera/core/ops/detail/op_utils.h"

namespace tessera::ops {

namespace {

// Element ranges of two contiguous tensors in one storage must not overlap: the kernel reads
// and writes each array once, in a single pass, and aliasing would corrupt the update.
void check_disjoint(const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  if (a.storage() != b.storage() || a.numel() == 0) return;
  int64_t a0 = a.offset() * int64_t(a.itemsize()), a1 = a0 + int64_t(a.nbytes());
  int64_t b0 = b.offset() * int64_t(b.itemsize()), b1 = b0 + int64_t(b.nbytes());
  TESSERA_CHECK(a1 <= b0 || b1 <= a0, "adamw: ", an, " (", a.describe(), ") and ", bn, " (",
                b.describe(), ") overlap in memory");
}

}  // namespace

void adamw_step_(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                 const AdamWArgs& args, const Tensor& rounded) {
  const OpScope scope("adamw_step_");
  const char* op = "adamw";
  const Tensor* all[] = {&param, &grad, &m, &v, &rounded};
  const char* names[] = {"param", "grad", "m", "v", "rounded"};
  const int count = rounded.defined() ? 5 : 4;
  for (int i = 0; i < count; ++i) {
    detail::check_defined(op, *all[i], names[i]);
    const DType dt = all[i]->dtype();
    if (i == 1) {
      TESSERA_CHECK(dt == DType::f32 || dt == DType::bf16 || dt == DType::f16, op,
                    ": grad must be f32, bf16 or f16, got ", grad.describe());
    } else if (i == 4) {
      TESSERA_CHECK(dt == DType::bf16 || dt == DType::f16, op,
                    ": rounded must be bf16 or f16, got ", rounded.describe());
    } else {
      detail::check_dtype(op, *all[i], DType::f32, names[i]);
    }
    TESSERA_CHECK(all[i]->is_contiguous(), op, ": ", names[i], " (", all[i]->describe(),
                  ") must be contiguous, got strides ", all[i]->strides());
    if (i > 0) detail::check_shape(op, *all[i], param.shape(), names[i]);
  }
  detail::check_same_device(op, {&param, &grad, &m, &v, &rounded});  // skips an undefined one
  for (int i = 0; i < count; ++i)
    for (int j = i + 1; j < count; ++j) check_disjoint(*all[i], names[i], *all[j], names[j]);
  TESSERA_CHECK(args.step >= 1, op, ": step must be at least 1 (it is 1-based), got ", args.step);
  TESSERA_CHECK(args.beta1 >= 0.0f && args.beta1 < 1.0f && args.beta2 >= 0.0f && args.beta2 < 1.0f,
                op, ": betas must be in [0, 1), got (", args.beta1, ", ", args.beta2, ")");
  TESSERA_CHECK(args.eps > 0.0f && std::isfinite(args.lr) && std::isfinite(args.weight_decay) &&
                    std::isfinite(args.grad_scale),
                op, ": expected finite lr, weight_decay, grad_scale and eps > 0, got lr=", args.lr,
                " weight_decay=", args.weight_decay, " grad_scale=", args.grad_scale,
                " eps=", args.eps);
  TESSERA_CHECK(!args.stochastic_rounding || (rounded.defined() && rounded.dtype() == DType::bf16),
                op, ": stochastic rounding writes a bf16 copy of param, got rounded = ",
                rounded.defined() ? rounded.describe() : std::string("none"));
  if (param.numel() > 0) detail::backend(param).adamw_step(param, grad, m, v, rounded, args);
  param.storage()->bump_version();
  m.storage()->bump_version();
  v.storage()->bump_version();
  if (rounded.defined()) rounded.storage()->bump_version();
}

}  // namespace tessera::ops
