#include "tessera/autograd/engine.h"

#include <queue>
#include <unordered_map>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/detail/op_scope.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/movement.h"

namespace tessera::autograd {

namespace {

// Adds `grad` into leaf.grad: adopts it when nothing else can see it, else accumulates in place
// (so a grad that is a view into a flat buffer stays one).
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}
  const char* name() const override { return "accumulate_grad"; }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    Tensor leaf(leaf_);
    Tensor current = leaf.grad();
    if (!current.defined()) {
      // Adopt only a dense tensor no one else holds: another handle or view of the same
      // storage (add's backward hands one gradient to both inputs) would alias the grads.
      bool private_dense = g.is_contiguous() && g.shared_impl().use_count() == 1 &&
                           g.storage().use_count() == 1 && g.nbytes() == g.storage()->nbytes();
      leaf.set_grad(private_dense ? detach(g) : ops::clone(g));
    } else {
      TESSERA_CHECK(current.shape() == g.shape(), "accumulate_grad: existing grad ",
                    current.describe(), " does not match incoming ", g.describe());
      ops::add_(current, g);
    }
    for (auto& hook : leaf_->post_accumulate_hooks) hook(leaf);
    return {};
  }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

// Sums gradient contributions for one input slot: in place when the slot's tensor is dense
// and nothing else holds it or its storage (a tied embedding's two [V, C] gradients then cost
// no third buffer), out of place otherwise.
void accumulate_into(Tensor& slot, const Tensor& g) {
  if (!slot.defined()) {
    slot = g;
    return;
  }
  bool private_dense = slot.is_contiguous() && slot.shared_impl().use_count() == 1 &&
                       slot.storage().use_count() == 1 && slot.dtype() == g.dtype() &&
                       slot.shape() == g.shape() && !slot.storage()->released();
  if (private_dense) {
    ops::add_(slot, g);
  } else {
    slot = ops::add(slot, g);
  }
}

Tensor ones_for(const Tensor& root) {
  TESSERA_CHECK(root.numel() == 1, "backward: gradient can be implicitly created only for a ",
                "one-element output, got ", root.describe(), "; pass a gradient");
  return full(root.shape(), 1.0, root.dtype(), root.device());
}

}  // namespace

std::shared_ptr<Node> make_accumulate_grad(const Tensor& leaf) {
  TensorImpl* impl = leaf.impl_ptr();
  if (auto existing = impl->grad_accumulator.lock()) return existing;
  auto node = std::make_shared<AccumulateGrad>(leaf.shared_impl());
  impl->grad_accumulator = node;
  return node;
}

void register_post_accumulate_hook(const Tensor& leaf, std::function<void(const Tensor&)> fn) {
  TESSERA_CHECK(leaf.is_leaf() && leaf.requires_grad(),
                "register_post_accumulate_hook: ", leaf.describe(),
                " is not a leaf that requires grad");
  leaf.impl_ptr()->post_accumulate_hooks.push_back(std::move(fn));
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph) {
  TESSERA_CHECK(grads.empty() || grads.size() == roots.size(), "backward: ", roots.size(),
                " roots but ", grads.size(), " gradients");
  // Backward formulas use raw ops; nothing in the backward pass is recorded.
  NoGradGuard no_grad;

  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::vector<std::pair<std::shared_ptr<Node>, Tensor>> starts;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    TESSERA_CHECK(root.defined(), "backward: root ", i, " is undefined");
    TESSERA_CHECK(root.requires_grad(), "backward: ", root.describe(),
                  " does not require grad (it was computed under no_grad, or from inputs that "
                  "do not require grad), so there is no graph to backpropagate through");
    Tensor g = (grads.empty() || !grads[i].defined()) ? ones_for(root) : grads[i];
    TESSERA_CHECK(g.shape() == root.shape(), "backward: gradient ", g.describe(),
                  " does not match root ", root.describe());
    std::shared_ptr<Node> node = root.grad_fn() ? root.grad_fn() : make_accumulate_grad(root);
    uint32_t slot = root.grad_fn() ? root.output_nr() : 0;
    auto& buf = buffers[node.get()];
    buf.resize(std::max<size_t>(buf.size(), slot + 1));
    accumulate_into(buf[slot], g);
    starts.emplace_back(node, g);
  }

  // Count, for every reachable node, how many edges lead into it.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  std::unordered_map<Node*, bool> seen;
  for (auto& [node, g] : starts) {
    if (!seen[node.get()]) {
      seen[node.get()] = true;
      stack.push_back(node.get());
    }
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (!e.valid()) continue;
      ++deps[e.node.get()];
      if (!seen[e.node.get()]) {
        seen[e.node.get()] = true;
        stack.push_back(e.node.get());
      }
    }
  }

  // Ready nodes run latest-created first, which keeps memory low and the order deterministic.
  auto later_first = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) {
    return a->sequence_nr() < b->sequence_nr();
  };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>,
                      decltype(later_first)>
      ready(later_first);
  for (auto& [node, g] : starts) {
    if (deps[node.get()] == 0) {
      ready.push(node);
      deps[node.get()] = -1;  // queued
    }
  }

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    std::vector<Tensor> in = std::move(buffers[node.get()]);
    buffers.erase(node.get());
    const auto& outs = node->output_meta();
    bool any_grad = false;
    for (const Tensor& g : in) any_grad = any_grad || g.defined();
    in.resize(std::max(in.size(), outs.size()));
    for (size_t i = 0; i < outs.size(); ++i)
      if (!in[i].defined()) in[i] = zeros(outs[i].shape, outs[i].dtype, outs[i].device);

    // A node no gradient reached contributes nothing; it only releases its dependants.
    std::vector<Tensor> out_grads;
    if (any_grad) {
      const OpScope scope(node->name(), "backward");
      out_grads = node->backward(in);
    }
    if (!retain_graph) node->release_saved();

    const auto& edges = node->next_edges();
    TESSERA_ASSERT(!any_grad || out_grads.size() == edges.size() || edges.empty(), node->name(),
                   " returned ", out_grads.size(), " gradients for ", edges.size(), " inputs");
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.valid()) continue;
      Tensor g = any_grad ? out_grads[i] : Tensor();
      if (g.defined()) {
        const TensorMeta& meta = node->input_meta()[i];
        TESSERA_ASSERT(g.shape() == meta.shape, "backward of ", node->name(), ": gradient ",
                       g.describe(), " for input ", i, " of shape ", meta.shape);
        if (g.dtype() != meta.dtype) g = ops::cast(g, meta.dtype);
        auto& buf = buffers[e.node.get()];
        buf.resize(std::max<size_t>(buf.size(), e.input_nr + 1));
        accumulate_into(buf[e.input_nr], g);
      }
      if (--deps[e.node.get()] == 0) {
        ready.push(e.node);
        deps[e.node.get()] = -1;
      }
    }
  }
}

}  // namespace tessera::autograd
