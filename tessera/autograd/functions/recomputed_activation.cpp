// Backward of the recomputing linears. With A = act(inputs) formed again and Y = A W^T + b:
//   dA = dY W,  dW = dY^T A (one GEMM over the flattened batch),  db = dY summed over rows,
// then the activation's own backward from its saved inputs. Each op, operand and layout is the
// one linear()'s and the activation's nodes use (matmul.cpp, elementwise.cpp), in the same
// order, so the gradients are those bits. A lives only inside backward().

#include "tessera/autograd/functions/recomputed_activation.h"

#include "tessera/autograd/functions/matmul.h"
#include "tessera/autograd/node.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/matmul.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/reduction.h"

namespace tessera {

namespace {

using autograd::Node;

struct LinearGrads {
  Tensor ga, gw, gbias;
};

// linear()'s backward for a [..., in] input a that needs its gradient.
LinearGrads linear_grads(const Node& node, const Tensor& a, const Tensor& weight, const Tensor& g,
                         size_t weight_input) {
  LinearGrads r;
  r.ga = ops::matmul(g, weight, false, false);
  if (node.needs_input_grad(weight_input)) {
    int64_t batch = 1;
    for (int d = 0; d + 2 < g.dim(); ++d) batch *= g.size(d);
    // matmul.cpp's two cases: one GEMM over the flattened batch, or a single matrix.
    r.gw = batch > 1 ? ops::matmul(ops::reshape(g, Shape{-1, g.size(-1)}),
                                   ops::reshape(a, Shape{-1, a.size(-1)}), true, false)
                     : ops::sum_to(ops::matmul(g, a, true, false), weight.shape());
  }
  if (node.needs_input_grad(weight_input + 1)) {
    std::vector<int64_t> rows;
    for (int d = 0; d + 1 < g.dim(); ++d) rows.push_back(d);
    r.gbias = ops::sum(g, rows);
  }
  return r;
}

class LinearRecomputingGeluBackward final : public Node {
 public:
  const char* name() const override { return "linear_recomputing_gelu"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor pre = saved(0);
    const Tensor a = ops::unary(UnaryOp::gelu, pre);
    LinearGrads g = linear_grads(*this, a, saved(1), grads[0], 1);
    Tensor gpre;
    if (needs_input_grad(0)) gpre = ops::unary_backward(UnaryOp::gelu, pre, Tensor(), g.ga, 0.0);
    return {gpre, g.gw, g.gbias};
  }
};

class LinearRecomputingSwigluBackward final : public Node {
 public:
  const char* name() const override { return "linear_recomputing_swiglu"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor gate = saved(0), up = saved(1);
    const Tensor s = ops::unary(UnaryOp::silu, gate);
    LinearGrads g = linear_grads(*this, ops::mul(s, up), saved(2), grads[0], 2);
    Tensor ggate, gup;
    if (needs_input_grad(0))
      ggate = ops::unary_backward(UnaryOp::silu, gate, Tensor(), ops::mul(g.ga, up), 0.0);
    if (needs_input_grad(1)) gup = ops::mul(g.ga, s);
    return {ggate, gup, g.gw, g.gbias};
  }
};

void check_same_shape(const char* op, const Tensor& a, const Tensor& b) {
  TESSERA_CHECK(a.defined() && b.defined() && a.shape() == b.shape(), op,
                ": gate and up must have one shape, got ", describe(a), " and ", describe(b));
}

}  // namespace

Tensor linear_recomputing_gelu(const Tensor& pre, const Tensor& weight, const Tensor& bias) {
  check_linear_args("linear_recomputing_gelu", pre, weight);
  Tensor out = ops::matmul(ops::unary(UnaryOp::gelu, pre), weight, false, true, bias);
  if (autograd::any_requires_grad({&pre, &weight, &bias})) {
    auto node = std::make_shared<LinearRecomputingGeluBackward>();
    node->save({pre, weight});
    node->connect({pre, weight, bias}, {&out});
  }
  return out;
}

Tensor linear_recomputing_swiglu(const Tensor& gate, const Tensor& up, const Tensor& weight,
                                 const Tensor& bias) {
  check_same_shape("linear_recomputing_swiglu", gate, up);
  check_linear_args("linear_recomputing_swiglu", gate, weight);
  Tensor product = ops::mul(ops::unary(UnaryOp::silu, gate), up);
  Tensor out = ops::matmul(product, weight, false, true, bias);
  if (autograd::any_requires_grad({&gate, &up, &weight, &bias})) {
    auto node = std::make_shared<LinearRecomputingSwigluBackward>();
    node->save({gate, up, weight});
    node->connect({gate, up, weight, bias}, {&out});
  }
  return out;
}

}  // namespace tessera
