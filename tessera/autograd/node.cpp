#include "tessera/autograd/node.h"

#include <atomic>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"

namespace tessera::autograd {

namespace {
std::atomic<uint64_t> next_sequence_nr{0};

// Tensor::backward (core) runs the engine through this hook. It is installed here, with the
// nodes, so every program that can build a graph has it.
void backward_from(const Tensor& root, const Tensor& gradient, bool retain_graph) {
  backward({root}, {gradient}, retain_graph);
}
[[maybe_unused]] const bool engine_installed =
    (tessera::detail::set_backward_engine(&backward_from), true);

TensorMeta meta_of(const Tensor& t) {
  return {t.shape(), t.dtype(), t.device()};
}
}  // namespace

Node::Node() : sequence_nr_(next_sequence_nr.fetch_add(1)) {}

void Node::save(std::initializer_list<Tensor> tensors) {
  for (const Tensor& t : tensors) {
    if (!t.defined()) {
      saved_.push_back({Tensor(), 0});
      continue;
    }
    saved_.push_back({detach(t), t.storage()->version()});
  }
}

void Node::save(const std::vector<Tensor>& tensors) {
  for (const Tensor& t : tensors) save({t});
}

Tensor Node::saved(size_t i) const {
  TESSERA_CHECK(!released_, "backward of ", name(),
                ": trying to backward through the graph a second time, but its saved tensors "
                "were freed by the first backward; pass retain_graph=true to the first call");
  TESSERA_ASSERT(i < saved_.size(), "saved tensor ", i, " of ", name());
  const SavedTensor& s = saved_[i];
  if (s.tensor.defined()) {
    uint64_t now = s.tensor.storage()->version();
    TESSERA_CHECK(now == s.version, "backward of ", name(), ": saved tensor ", i, " (",
                  s.tensor.describe(), ") was modified in place after it was saved (version ",
                  s.version, " -> ", now, "); its gradient would be wrong");
  }
  return s.tensor;
}

void Node::release_saved() {
  saved_.clear();
  released_ = true;
}

void Node::connect(const std::vector<Tensor>& inputs, std::vector<Tensor*> outputs) {
  next_edges_.clear();
  input_meta_.clear();
  for (const Tensor& in : inputs) {
    Edge e;
    if (in.defined() && in.requires_grad()) {
      if (in.grad_fn()) {
        e = {in.grad_fn(), in.output_nr()};
      } else {
        e = {make_accumulate_grad(in), 0};
      }
    }
    next_edges_.push_back(std::move(e));
    input_meta_.push_back(in.defined() ? meta_of(in) : TensorMeta{});
  }
  output_meta_.clear();
  uint32_t nr = 0;
  for (Tensor* out : outputs) {
    for (const Tensor& in : inputs)
      if (out->is_same(in)) *out = detach(in);
    TensorImpl* impl = out->impl_ptr();
    impl->grad_fn = shared_from_this();
    impl->output_nr = nr++;
    output_meta_.push_back(meta_of(*out));
  }
}

Tensor detach(const Tensor& x) {
  if (!x.defined()) return x;
  return Tensor(x.storage(), x.shape(), x.strides(), x.offset(), x.dtype());
}

bool any_requires_grad(std::initializer_list<const Tensor*> inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t != nullptr && t->defined() && t->requires_grad()) return true;
  return false;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

}  // namespace tessera::autograd
