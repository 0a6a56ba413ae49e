// Backward nodes for LayerNorm and RMSNorm. Both save the contiguous input and the per-row
// statistics of the forward pass, and call the fused backward kernel, which forms gx and
// (only when an input needs them) the weight and bias gradients in one pass over the rows.

#include "tessera/autograd/functions/norm.h"

#include "tessera/autograd/node.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/norm.h"

namespace tessera {

namespace {

using autograd::Node;

// Inputs (x, weight, bias); saved (x, weight, mean, rstd).
class LayerNormBackward final : public Node {
 public:
  const char* name() const override { return "layernorm"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    ops::NormGrads g = ops::layernorm_backward(saved(0), saved(1), saved(2), saved(3), grads[0],
                                               needs_input_grad(1), needs_input_grad(2));
    return {needs_input_grad(0) ? g.gx : Tensor(), g.gw, g.gb};
  }
};

// Inputs (x, weight); saved (x, weight, rstd).
class RMSNormBackward final : public Node {
 public:
  const char* name() const override { return "rmsnorm"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    ops::NormGrads g =
        ops::rmsnorm_backward(saved(0), saved(1), saved(2), grads[0], needs_input_grad(1));
    return {needs_input_grad(0) ? g.gx : Tensor(), g.gw};
  }
};

}  // namespace

Tensor layernorm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  // The front end would copy a non-contiguous x anyway; copying here lets backward reuse it.
  Tensor xc = x.defined() ? ops::contiguous(x) : x;
  ops::LayerNormOutput out = ops::layernorm_forward(xc, weight, bias, eps);
  if (autograd::any_requires_grad({&x, &weight, &bias})) {
    auto node = std::make_shared<LayerNormBackward>();
    node->save({xc, weight, out.mean, out.rstd});
    node->connect({x, weight, bias}, {&out.y});
  }
  return out.y;
}

Tensor rmsnorm(const Tensor& x, const Tensor& weight, double eps) {
  Tensor xc = x.defined() ? ops::contiguous(x) : x;
  ops::RMSNormOutput out = ops::rmsnorm_forward(xc, weight, eps);
  if (autograd::any_requires_grad({&x, &weight})) {
    auto node = std::make_shared<RMSNormBackward>();
    node->save({xc, weight, out.rstd});
    node->connect({x, weight}, {&out.y});
  }
  return out.y;
}

}  // namespace tessera
