#pragma once
// The backward engine: topologically orders the nodes reachable from the roots, runs each
// node's backward once, and accumulates into leaves. Saved tensors are freed as it goes unless
// retain_graph is set.

#include <memory>
#include <vector>

#include "tessera/autograd/node.h"

namespace tessera::autograd {

// Backpropagates grads[i] from roots[i]. An undefined grad means ones (allowed for one-element
// roots only). Throws if a root does not require grad.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {},
              bool retain_graph = false);

// The node that accumulates into leaf's grad (shared by every use of the leaf in the graph).
std::shared_ptr<Node> make_accumulate_grad(const Tensor& leaf);

// Registers fn(leaf) to run whenever a backward pass has finished accumulating leaf's grad.
void register_post_accumulate_hook(const Tensor& leaf, std::function<void(const Tensor&)> fn);

}  // namespace tessera::autograd
