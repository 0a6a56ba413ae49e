#pragma once
// The tape. Each differentiable op that sees an input requiring grad creates a Node: it holds
// the tensors the backward formula needs (saved), one Edge per input pointing at the node that
// produced that input, and a description of each output so missing gradients can be zeros.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "tessera/core/tensor.h"

namespace tessera::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> node;  // null: this input needs no gradient
  uint32_t input_nr = 0;       // which output of `node` the input was
  bool valid() const { return node != nullptr; }
};

struct TensorMeta {
  Shape shape;
  DType dtype = DType::f32;
  Device device;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // The op's name, for error messages ("mul", "layernorm", ...).
  virtual const char* name() const = 0;
  // grads[i] is the gradient of output i (zeros where none flowed). Returns one gradient per
  // input, shaped like that input; an entry may be undefined when the input needs none.
  virtual std::vector<Tensor> backward(const std::vector<Tensor>& grads) = 0;

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  const std::vector<TensorMeta>& input_meta() const { return input_meta_; }
  const std::vector<TensorMeta>& output_meta() const { return output_meta_; }
  bool needs_input_grad(size_t i) const { return i < next_edges_.size() && next_edges_[i].valid(); }
  // Creation order; the engine runs later nodes first among those ready.
  uint64_t sequence_nr() const { return sequence_nr_; }

  // Keeps tensors for backward. They are stored detached (no reference back to this node, so
  // no cycles) together with their storage version.
  void save(std::initializer_list<Tensor> tensors);
  void save(const std::vector<Tensor>& tensors);
  // A saved tensor; throws if the graph was already freed by a backward pass, or if the
  // tensor was modified in place after it was saved.
  Tensor saved(size_t i) const;
  size_t num_saved() const { return saved_.size(); }
  void release_saved();

  // Connects inputs and outputs: edges from the inputs, and this node as the outputs'
  // grad_fn. An output that is the same handle as an input is first replaced by an alias.
  void connect(const std::vector<Tensor>& inputs, std::vector<Tensor*> outputs);

 protected:
  struct SavedTensor {
    Tensor tensor;
    uint64_t version = 0;
  };
  std::vector<SavedTensor> saved_;
  bool released_ = false;

 private:
  std::vector<Edge> next_edges_;
  std::vector<TensorMeta> input_meta_;
  std::vector<TensorMeta> output_meta_;
  uint64_t sequence_nr_;
};

// A handle sharing x's storage and layout but cut from the graph (no grad_fn, no grad).
Tensor detach(const Tensor& x);
// True when grad mode is on and some defined input requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> inputs);
bool any_requires_grad(const std::vector<Tensor>& inputs);

}  // namespace tessera::autograd
