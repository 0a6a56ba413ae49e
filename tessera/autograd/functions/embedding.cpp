// Backward node for the embedding lookup: the weight gradient is a deterministic scatter-add
// of the output gradient's rows; the ids are not differentiable.

#include "tessera/autograd/functions/embedding.h"

#include "tessera/autograd/node.h"
#include "tessera/core/ops/embedding.h"

namespace tessera {

namespace {

using autograd::Node;

// Input (weight); saved (ids).
class EmbeddingBackward final : public Node {
 public:
  const char* name() const override { return "embedding"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {ops::embedding_backward(saved(0), grads[0], input_meta()[0].shape[0])};
  }
};

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  Tensor out = ops::embedding(weight, ids);
  if (autograd::any_requires_grad({&weight})) {
    auto node = std::make_shared<EmbeddingBackward>();
    node->save({ids});
    node->connect({weight}, {&out});
  }
  return out;
}

}  // namespace tessera
