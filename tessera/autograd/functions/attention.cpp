// Backward of causal attention (the fused kernel recomputes the softmax from the saved lse, so
// only q, k, v, out and lse are kept: O(T) per head) and of RoPE (the inverse rotation).

#include "tessera/autograd/functions/attention.h"

#include "tessera/autograd/node.h"
#include "tessera/core/ops/attention.h"

namespace tessera {

namespace {

using autograd::Node;

class AttentionBackward final : public Node {
 public:
  explicit AttentionBackward(double scale) : scale_(scale) {}
  const char* name() const override { return "attention"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    ops::AttentionGrads g =
        ops::attention_backward(saved(0), saved(1), saved(2), saved(3), saved(4), grads[0], scale_);
    return {needs_input_grad(0) ? g.gq : Tensor(), needs_input_grad(1) ? g.gk : Tensor(),
            needs_input_grad(2) ? g.gv : Tensor()};
  }

 private:
  double scale_;
};

class RopeBackward final : public Node {
 public:
  RopeBackward(int64_t pos_offset, double theta) : pos_offset_(pos_offset), theta_(theta) {}
  const char* name() const override { return "rope"; }
  // A rotation's transpose is its inverse.
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {ops::rope(grads[0], pos_offset_, theta_, true)};
  }

 private:
  int64_t pos_offset_;
  double theta_;
};

}  // namespace

Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  ops::AttentionOutput r = ops::attention_forward(q, k, v, scale);
  if (autograd::any_requires_grad({&q, &k, &v})) {
    auto node = std::make_shared<AttentionBackward>(scale);
    node->save({q, k, v, r.out, r.lse});
    node->connect({q, k, v}, {&r.out});
  }
  return r.out;
}

Tensor rope(const Tensor& x, int64_t pos_offset, double theta) {
  Tensor out = ops::rope(x, pos_offset, theta, false);
  if (autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<RopeBackward>(pos_offset, theta);
    node->connect({x}, {&out});
  }
  return out;
}

}  // namespace tessera
