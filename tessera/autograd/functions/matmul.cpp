// Backward of matmul and linear. With A' = op_a(A), B' = op_b(B) and C = A' B' (+ bias):
//   dA' = G B'^T,  dB' = A'^T G,  dbias = G summed over every row.
// Each is one matmul with transpose flags chosen so no operand is transposed in memory; when
// op_a or op_b transposed an input, the gradient is formed transposed too (dA = dA'^T).
// Batch dims an input was broadcast over are summed back. A weight shared by the whole batch
// (b without batch dims, the linear-layer case) gets its gradient as ONE GEMM over the
// flattened batch: dB' = A'^T G with A' viewed as [batch*M, K] and G as [batch*M, N].

#include "tessera/autograd/functions/matmul.h"

#include "tessera/autograd/node.h"
#include "tessera/core/ops/matmul.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/reduction.h"

namespace tessera {

namespace {

using autograd::Node;

int64_t batch_numel(const Shape& s) {
  int64_t n = 1;
  for (int i = 0; i + 2 < s.size(); ++i) n *= s[i];
  return n;
}

class MatmulBackward final : public Node {
 public:
  MatmulBackward(bool trans_a, bool trans_b) : trans_a_(trans_a), trans_b_(trans_b) {}
  const char* name() const override { return "matmul"; }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    Tensor ga, gb, gbias;
    if (needs_input_grad(0)) ga = grad_a(saved(1), g);
    if (needs_input_grad(1)) gb = grad_b(saved(0), g);
    if (needs_input_grad(2)) {
      std::vector<int64_t> rows;
      for (int d = 0; d + 1 < g.dim(); ++d) rows.push_back(d);
      gbias = ops::sum(g, rows);
    }
    return {ga, gb, gbias};
  }

 private:
  Tensor grad_a(const Tensor& b, const Tensor& g) const {
    // dA' = G B'^T; with trans_a, dA = B' G^T.
    Tensor full =
        trans_a_ ? ops::matmul(b, g, trans_b_, true) : ops::matmul(g, b, false, !trans_b_);
    return ops::sum_to(full, input_meta()[0].shape);
  }

  Tensor grad_b(const Tensor& a, const Tensor& g) const {
    const Shape& b_shape = input_meta()[1].shape;
    const int64_t k = trans_a_ ? a.size(-2) : a.size(-1);
    if (batch_numel(b_shape) == 1 && batch_numel(g.shape()) > 1 &&
        batch_numel(a.shape()) == batch_numel(g.shape())) {
      // A' as [batch*M, K] (a view unless A' is stored transposed) and G as [batch*M, N].
      Tensor a_mk = trans_a_ ? ops::transpose(a, -1, -2) : a;
      Tensor a2 = ops::reshape(a_mk, Shape{-1, k});
      Tensor g2 = ops::reshape(g, Shape{-1, g.size(-1)});
      Tensor gb = trans_b_ ? ops::matmul(g2, a2, true, false) : ops::matmul(a2, g2, true, false);
      return ops::reshape(gb, b_shape);
    }
    // dB' = A'^T G; with trans_b, dB = G^T A'.
    Tensor full =
        trans_b_ ? ops::matmul(g, a, true, trans_a_) : ops::matmul(a, g, !trans_a_, false);
    return ops::sum_to(full, b_shape);
  }

  bool trans_a_, trans_b_;
};

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, const Tensor& bias) {
  Tensor out = ops::matmul(a, b, trans_a, trans_b, bias);
  if (autograd::any_requires_grad({&a, &b, &bias})) {
    auto node = std::make_shared<MatmulBackward>(trans_a, trans_b);
    // a is read only by b's gradient and b only by a's.
    node->save({b.requires_grad() ? a : Tensor(), a.requires_grad() ? b : Tensor()});
    node->connect({a, b, bias}, {&out});
  }
  return out;
}

void check_linear_args(const char* op, const Tensor& x, const Tensor& weight) {
  TESSERA_CHECK(x.defined() && weight.defined(), op, ": x and weight must be defined, got x ",
                describe(x), " and weight ", describe(weight));
  TESSERA_CHECK(weight.dim() == 2, op, ": weight must be 2-d [out, in], got ", weight.describe(),
                " (x ", x.describe(), ")");
  TESSERA_CHECK(x.dim() >= 2 && x.size(-1) == weight.size(1), op, ": x must be [..., ",
                weight.size(1), "] (at least 2-d) to match weight ", weight.describe(), ", got ",
                x.describe());
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear_args("linear", x, weight);
  return matmul(x, weight, false, true, bias);
}

}  // namespace tessera
