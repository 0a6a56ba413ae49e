#include "tessera/core/ops/elementwise.h"

#include "tessera/core/detail/op_scope.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/detail/op_utils.h"

namespace tessera::ops {

using detail::backend;
using detail::check_defined;

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  const char* name = binary_op_name(op);
  check_defined(name, a, "first input");
  check_defined(name, b, "second input");
  detail::check_same_device(name, {&a, &b});
  DType dtype = promote_types(a.dtype(), b.dtype());
  TESSERA_CHECK(op != BinaryOp::div || is_floating(dtype), "div: integer division is not ",
                "supported (", a.describe(), " / ", b.describe(), "); cast to a floating dtype");
  Shape shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = empty(shape, dtype, a.device());
  if (out.numel() > 0)
    backend(a).binary(op, expand(cast(a, dtype), shape), expand(cast(b, dtype), shape), out);
  return out;
}

Tensor add(const Tensor& a, const Tensor& b) {
  const OpScope scope("add");
  return binary(BinaryOp::add, a, b);
}
Tensor sub(const Tensor& a, const Tensor& b) {
  const OpScope scope("sub");
  return binary(BinaryOp::sub, a, b);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  const OpScope scope("mul");
  return binary(BinaryOp::mul, a, b);
}
Tensor div(const Tensor& a, const Tensor& b) {
  const OpScope scope("div");
  return binary(BinaryOp::div, a, b);
}

namespace {
Tensor scalar_like(const Tensor& a, double value, const char* op) {
  check_defined(op, a);
  return scalar_tensor(value, a.dtype(), a.device());
}
}  // namespace

Tensor add(const Tensor& a, double b) {
  const OpScope scope("add");
  return add(a, scalar_like(a, b, "add"));
}
Tensor sub(const Tensor& a, double b) {
  const OpScope scope("sub");
  return sub(a, scalar_like(a, b, "sub"));
}
Tensor mul(const Tensor& a, double b) {
  const OpScope scope("mul");
  return mul(a, scalar_like(a, b, "mul"));
}
Tensor div(const Tensor& a, double b) {
  const OpScope scope("div");
  return div(a, scalar_like(a, b, "div"));
}

Tensor unary(UnaryOp op, const Tensor& x, double scalar) {
  const char* name = unary_op_name(op);
  check_defined(name, x);
  if (op != UnaryOp::neg && op != UnaryOp::relu) detail::check_floating(name, x);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (out.numel() > 0) backend(x).unary(op, x, out, scalar);
  return out;
}

// neg, exp, ... relu: one definition each from the op table.
#define TESSERA_UNARY_OP(name)      \
  Tensor name(const Tensor& x) {    \
    const OpScope scope(#name);     \
    return unary(UnaryOp::name, x); \
  }
#include "tessera/core/op_table.def"

Tensor pow(const Tensor& x, double exponent) {
  const OpScope scope("pow");
  return unary(UnaryOp::pow_scalar, x, exponent);
}

Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy,
                      double scalar) {
  const OpScope scope("unary_backward");
  const char* name = unary_op_name(op);
  check_defined(name, x);
  check_defined(name, gy, "gradient");
  detail::check_same_device(name, {&x, &y, &gy});
  detail::check_floating(name, x);
  TESSERA_CHECK(gy.shape() == x.shape(), name, " backward: gradient ", gy.describe(),
                " does not match input ", x.describe());
  bool needs_y =
      op == UnaryOp::exp || op == UnaryOp::tanh || op == UnaryOp::sqrt || op == UnaryOp::rsqrt;
  TESSERA_CHECK(!needs_y || y.defined(), name, " backward: needs the forward output");
  Tensor gx = empty(x.shape(), x.dtype(), x.device());
  if (gx.numel() > 0) {
    Tensor yc = y.defined() ? cast(y, x.dtype()) : Tensor();
    backend(x).unary_backward(op, x, yc, cast(gy, x.dtype()), gx, scalar);
  }
  return gx;
}

namespace {
void check_swiglu_operand(const char* op, const Tensor& gate, const Tensor& t, const char* what) {
  check_defined(op, t, what);
  TESSERA_CHECK(t.shape() == gate.shape() && t.dtype() == gate.dtype(), op, ": ", what, " ",
                t.describe(), " must match gate ", gate.describe(), " (shape and dtype)");
}
}  // namespace

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  const OpScope scope("swiglu");
  check_defined("swiglu", gate, "gate");
  check_swiglu_operand("swiglu", gate, up, "up");
  detail::check_same_device("swiglu", {&gate, &up});
  detail::check_floating("swiglu", gate);
  Tensor out = empty(gate.shape(), gate.dtype(), gate.device());
  if (out.numel() > 0) backend(gate).swiglu(gate, up, out);
  return out;
}

std::pair<Tensor, Tensor> swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& gy) {
  const OpScope scope("swiglu_backward");
  const char* name = "swiglu backward";
  check_defined(name, gate, "gate");
  check_swiglu_operand(name, gate, up, "up");
  check_defined(name, gy, "gradient");
  TESSERA_CHECK(gy.shape() == gate.shape(), name, ": gradient ", gy.describe(),
                " does not match gate ", gate.describe());
  detail::check_same_device(name, {&gate, &up, &gy});
  detail::check_floating(name, gate);
  Tensor ggate = empty(gate.shape(), gate.dtype(), gate.device());
  Tensor gup = empty(gate.shape(), gate.dtype(), gate.device());
  if (ggate.numel() > 0)
    backend(gate).swiglu_backward(gate, up, cast(gy, gate.dtype()), ggate, gup);
  return {ggate, gup};
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const OpScope scope("where");
  check_defined("where", cond, "condition");
  check_defined("where", a, "first input");
  check_defined("where", b, "second input");
  detail::check_same_device("where", {&cond, &a, &b});
  DType dtype = promote_types(a.dtype(), b.dtype());
  Shape shape =
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = empty(shape, dtype, a.device());
  if (out.numel() > 0)
    backend(a).where(expand(cond, shape), expand(cast(a, dtype), shape),
                     expand(cast(b, dtype), shape), out);
  return out;
}

void add_(const Tensor& dst, const Tensor& src) {
  check_defined("add_", dst, "destination");
  check_defined("add_", src, "source");
  detail::check_same_device("add_", {&dst, &src});
  Shape shape = broadcast_shapes(dst.shape(), src.shape(), "add_");
  TESSERA_CHECK(shape == dst.shape(), "add_: source ", src.describe(),
                " does not broadcast to destination ", dst.describe());
  if (dst.numel() > 0)
    backend(dst).binary(BinaryOp::add, dst, expand(cast(src, dst.dtype()), shape), dst);
  dst.storage()->bump_version();
}

void mul_(const Tensor& dst, double value) {
  check_defined("mul_", dst);
  if (dst.numel() > 0) {
    Tensor s = expand(scalar_tensor(value, dst.dtype(), dst.device()), dst.shape());
    backend(dst).binary(BinaryOp::mul, dst, s, dst);
  }
  dst.storage()->bump_version();
}

}  // namespace tessera::ops
