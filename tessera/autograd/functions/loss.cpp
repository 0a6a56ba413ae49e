// Backward node for the fused cross-entropy: saves the logits, targets and the forward pass's
// per-row logsumexp, and lets the fused kernel recompute softmax row by row.

#include "tessera/autograd/functions/loss.h"

#include "tessera/autograd/node.h"
#include "tessera/core/ops/movement.h"

namespace tessera {

namespace {

using autograd::Node;

// Input (logits); saved (logits, targets, lse, valid).
class CrossEntropyBackward final : public Node {
 public:
  CrossEntropyBackward(int64_t ignore_index, int64_t num_classes)
      : ignore_index_(ignore_index), num_classes_(num_classes) {}
  const char* name() const override { return "cross_entropy"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {ops::cross_entropy_backward(saved(0), saved(1), saved(2), saved(3), grads[0],
                                        ignore_index_, num_classes_)};
  }

 private:
  int64_t ignore_index_, num_classes_;
};

}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     int64_t num_classes) {
  // The front end would copy non-contiguous logits anyway; copying here lets backward reuse it.
  Tensor lc = logits.defined() ? ops::contiguous(logits) : logits;
  ops::CrossEntropyOutput out = ops::cross_entropy_forward(lc, targets, ignore_index, num_classes);
  if (autograd::any_requires_grad({&logits})) {
    auto node = std::make_shared<CrossEntropyBackward>(ignore_index, num_classes);
    node->save({lc, targets, out.lse, out.valid});
    node->connect({logits}, {&out.loss});
  }
  return out.loss;
}

}  // namespace tessera
