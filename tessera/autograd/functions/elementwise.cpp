// Backward formulas for elementwise ops. Broadcast inputs get their gradient summed back to
// their own shape (sum_to); activations use the backend's fused unary_backward.

#include "tessera/autograd/functions/elementwise.h"

#include "tessera/autograd/node.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/reduction.h"

namespace tessera {

namespace {

using autograd::Node;

class BinaryBackward final : public Node {
 public:
  explicit BinaryBackward(BinaryOp op) : op_(op) {}
  const char* name() const override { return binary_op_name(op_); }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    Tensor ga, gb;
    switch (op_) {
      case BinaryOp::add:
        ga = g;
        gb = g;
        break;
      case BinaryOp::sub:
        ga = g;
        if (needs_input_grad(1)) gb = ops::neg(g);
        break;
      case BinaryOp::mul:
        if (needs_input_grad(0)) ga = ops::mul(g, saved(1));
        if (needs_input_grad(1)) gb = ops::mul(g, saved(0));
        break;
      case BinaryOp::div: {
        Tensor b = saved(1);
        if (needs_input_grad(0)) ga = ops::div(g, b);
        if (needs_input_grad(1)) gb = ops::neg(ops::div(ops::mul(g, saved(0)), ops::mul(b, b)));
        break;
      }
    }
    return {reduce_to_input(ga, 0), reduce_to_input(gb, 1)};
  }

 private:
  Tensor reduce_to_input(const Tensor& g, size_t i) const {
    if (!g.defined() || !needs_input_grad(i)) return Tensor();
    return ops::sum_to(g, input_meta()[i].shape);
  }
  BinaryOp op_;
};

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  Tensor out = ops::binary(op, a, b);
  if (autograd::any_requires_grad({&a, &b})) {
    auto node = std::make_shared<BinaryBackward>(op);
    // Only what a gradient reads: a's is g * b (g / b), b's reads a. A product with a constant
    // (the vocab-parallel embedding's ownership mask) keeps no copy of the other factor.
    const bool grad_a = a.requires_grad(), grad_b = b.requires_grad();
    if (op == BinaryOp::mul) node->save({grad_b ? a : Tensor(), grad_a ? b : Tensor()});
    if (op == BinaryOp::div) node->save({grad_b ? a : Tensor(), b});
    node->connect({a, b}, {&out});
  }
  return out;
}

// Tensor-scalar ops: the scalar is a constant, so only a's gradient is formed.
class ScalarBackward final : public Node {
 public:
  ScalarBackward(BinaryOp op, double value) : op_(op), value_(value) {}
  const char* name() const override { return binary_op_name(op_); }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    switch (op_) {
      case BinaryOp::mul:
        return {ops::mul(grads[0], value_)};
      case BinaryOp::div:
        return {ops::div(grads[0], value_)};
      default:
        return {grads[0]};
    }
  }

 private:
  BinaryOp op_;
  double value_;
};

Tensor scalar_op(BinaryOp op, const Tensor& a, double value) {
  Tensor out;
  switch (op) {
    case BinaryOp::add:
      out = ops::add(a, value);
      break;
    case BinaryOp::sub:
      out = ops::sub(a, value);
      break;
    case BinaryOp::mul:
      out = ops::mul(a, value);
      break;
    case BinaryOp::div:
      out = ops::div(a, value);
      break;
  }
  if (autograd::any_requires_grad({&a})) {
    auto node = std::make_shared<ScalarBackward>(op, value);
    node->connect({a}, {&out});
  }
  return out;
}

class UnaryBackward final : public Node {
 public:
  UnaryBackward(UnaryOp op, double scalar) : op_(op), scalar_(scalar) {}
  const char* name() const override { return unary_op_name(op_); }
  // Which of (x, y) the derivative reads.
  static bool uses_y(UnaryOp op) {
    return op == UnaryOp::exp || op == UnaryOp::tanh || op == UnaryOp::sqrt || op == UnaryOp::rsqrt;
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (op_ == UnaryOp::neg) return {ops::neg(grads[0])};
    Tensor x = saved(0), y = saved(1);
    return {ops::unary_backward(op_, x, y, grads[0], scalar_)};
  }

 private:
  UnaryOp op_;
  double scalar_;
};

Tensor unary(UnaryOp op, const Tensor& x, double scalar = 0.0) {
  Tensor out = ops::unary(op, x, scalar);
  if (autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<UnaryBackward>(op, scalar);
    // x is needed by every formula but neg; y only by those reading the output.
    node->save({op == UnaryOp::neg ? Tensor() : x, UnaryBackward::uses_y(op) ? out : Tensor()});
    node->connect({x}, {&out});
  }
  return out;
}

class WhereBackward final : public Node {
 public:
  const char* name() const override { return "where"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    Tensor cond = saved(0);
    const Tensor& g = grads[0];
    Tensor zero = ops::mul(g, 0.0);
    Tensor ga, gb;
    if (needs_input_grad(1)) ga = ops::sum_to(ops::where(cond, g, zero), input_meta()[1].shape);
    if (needs_input_grad(2)) gb = ops::sum_to(ops::where(cond, zero, g), input_meta()[2].shape);
    return {Tensor(), ga, gb};
  }
};

// Saves the two inputs (not the output): both gradients are formed from gate and up in one
// fused pass.
class SwigluBackward final : public Node {
 public:
  const char* name() const override { return "swiglu"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    auto [ggate, gup] = ops::swiglu_backward(saved(0), saved(1), grads[0]);
    return {needs_input_grad(0) ? ggate : Tensor(), needs_input_grad(1) ? gup : Tensor()};
  }
};

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::add, a, b);
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::sub, a, b);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::mul, a, b);
}
Tensor div(const Tensor& a, const Tensor& b) {
  return binary(BinaryOp::div, a, b);
}
Tensor add(const Tensor& a, double b) {
  return scalar_op(BinaryOp::add, a, b);
}
Tensor sub(const Tensor& a, double b) {
  return scalar_op(BinaryOp::sub, a, b);
}
Tensor mul(const Tensor& a, double b) {
  return scalar_op(BinaryOp::mul, a, b);
}
Tensor div(const Tensor& a, double b) {
  return scalar_op(BinaryOp::div, a, b);
}

#define TESSERA_UNARY_OP(name)      \
  Tensor name(const Tensor& x) {    \
    return unary(UnaryOp::name, x); \
  }
#include "tessera/core/op_table.def"
Tensor pow(const Tensor& x, double exponent) {
  return unary(UnaryOp::pow_scalar, x, exponent);
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  Tensor out = ops::swiglu(gate, up);
  if (autograd::any_requires_grad({&gate, &up})) {
    auto node = std::make_shared<SwigluBackward>();
    node->save({gate, up});
    node->connect({gate, up}, {&out});
  }
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor out = ops::where(cond, a, b);
  if (autograd::any_requires_grad({&a, &b})) {
    auto node = std::make_shared<WhereBackward>();
    node->save({cond});
    node->connect({cond, a, b}, {&out});
  }
  return out;
}

}  // namespace tessera
