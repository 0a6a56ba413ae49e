// Backward of linear_gelu. With P = X W^T + b (saved) and Y = gelu(P):
//   dP = gelu'(P) dY (the gelu op's own backward), then linear's gradients:
//   dX = dP W,  dW = dP^T X (one GEMM over the flattened batch),  db = dP summed over rows.
// Each is the same op, on the same operands and layouts, as in the backward of linear followed
// by gelu, so the gradients are bit-identical to that pair's.

#include "tessera/autograd/functions/linear_gelu.h"

#include "tessera/autograd/functions/matmul.h"
#include "tessera/autograd/node.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/matmul.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/reduction.h"

namespace tessera {

namespace {

using autograd::Node;

class LinearGeluBackward final : public Node {
 public:
  const char* name() const override { return "linear_gelu"; }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor g = ops::unary_backward(UnaryOp::gelu, saved(2), Tensor(), grads[0], 0.0);
    Tensor gx, gw, gbias;
    if (needs_input_grad(0)) gx = ops::matmul(g, saved(1));
    if (needs_input_grad(1)) {
      const Tensor x = saved(0);
      gw = ops::matmul(ops::reshape(g, Shape{-1, g.size(-1)}),
                       ops::reshape(x, Shape{-1, x.size(-1)}), true, false);
    }
    if (needs_input_grad(2)) {
      std::vector<int64_t> rows;
      for (int d = 0; d + 1 < g.dim(); ++d) rows.push_back(d);
      gbias = ops::sum(g, rows);
    }
    return {gx, gw, gbias};
  }
};

}  // namespace

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear_args("linear_gelu", x, weight);
  ops::MatmulGelu r = ops::matmul_gelu(x, weight, false, true, bias);
  if (autograd::any_requires_grad({&x, &weight, &bias})) {
    auto node = std::make_shared<LinearGeluBackward>();
    // x is read only by weight's gradient and weight only by x's.
    node->save(
        {weight.requires_grad() ? x : Tensor(), x.requires_grad() ? weight : Tensor(), r.pre});
    node->connect({x, weight, bias}, {&r.out});
  }
  return r.out;
}

}  // namespace tessera
