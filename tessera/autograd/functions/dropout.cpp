// Dropout's backward is dropout again: the same (seed, offset) key regenerates the mask, so
// nothing but the key is saved.

#include "tessera/autograd/functions/dropout.h"

#include "tessera/autograd/node.h"
#include "tessera/core/ops/random_ops.h"

namespace tessera {

namespace {

class DropoutBackward final : public autograd::Node {
 public:
  DropoutBackward(double p, uint64_t seed, uint64_t offset) : p_(p), seed_(seed), offset_(offset) {}
  const char* name() const override { return "dropout"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {ops::dropout(grads[0], p_, seed_, offset_)};
  }

 private:
  double p_;
  uint64_t seed_, offset_;
};

}  // namespace

Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset) {
  Tensor out = ops::dropout(x, p, seed, offset);
  if (out.is_same(x)) return x;  // p == 0
  if (autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<DropoutBackward>(p, seed, offset);
    node->connect({x}, {&out});
  }
  return out;
}

Tensor dropout(const Tensor& x, double p, Generator& gen) {
  // Validate before advancing, so a rejected call leaves the stream untouched. The stream
  // advances by numel even for p == 0, so later draws do not depend on the dropout rate.
  Tensor out = dropout(x, p, gen.seed(), gen.offset());
  gen.advance(uint64_t(x.numel()));
  return out;
}

}  // namespace tessera
