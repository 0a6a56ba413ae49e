#pragma once
// Custom differentiable functions. Subclass Function, write forward (runs with recording off)
// and backward (gradients of the outputs in, gradients of the inputs out), then call
// apply_function(). Fused ops and the parallel layer's collectives use this.
//
//   struct Square : tessera::autograd::Function {
//     const char* name() const override { return "square"; }
//     std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
//       save({in[0]});
//       return {tessera::ops::mul(in[0], in[0])};
//     }
//     std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
//       return {tessera::ops::mul(tessera::ops::mul(g[0], saved(0)), 2.0)};
//     }
//   };
//   Tensor y = tessera::autograd::apply_function(std::make_shared<Square>(), {x})[0];

#include <memory>
#include <vector>

#include "tessera/autograd/node.h"

namespace tessera::autograd {

class Function : public Node {
 public:
  virtual std::vector<Tensor> forward(const std::vector<Tensor>& inputs) = 0;
  // True for functions whose backward matters even when no input requires grad, because it
  // reaches tensors that are not inputs (checkpointing recomputes with closure parameters).
  virtual bool records_without_grad_inputs() const { return false; }
};

// Runs fn->forward(inputs) with recording off; if grad mode is on and an input requires grad
// (or fn->records_without_grad_inputs()), connects fn into the graph as the outputs' grad_fn. A
// Function object is applied once.
std::vector<Tensor> apply_function(const std::shared_ptr<Function>& fn,
                                   const std::vector<Tensor>& inputs);

}  // namespace tessera::autograd
