// Backward formulas for reductions and softmax: sum and mean broadcast the gradient back
// (a stride-0 view, no copy), max routes it to the argmax, softmax uses its fused backward.

#include "tessera/autograd/functions/reduction.h"

#include "tessera/autograd/node.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/movement.h"

namespace tessera {

namespace {

using autograd::Node;

// The shape of the reduction's result with keepdim = true, for broadcasting grads back.
Shape kept_shape(const Shape& in, const std::vector<int64_t>& dims) {
  Shape s = in;
  if (dims.empty()) {
    for (int d = 0; d < s.size(); ++d) s[d] = 1;
  } else {
    for (int64_t d : dims) s[wrap_dim(d, in.size(), "sum")] = 1;
  }
  return s;
}

class SumBackward final : public Node {
 public:
  SumBackward(std::vector<int64_t> dims, bool mean) : dims_(std::move(dims)), mean_(mean) {}
  const char* name() const override { return mean_ ? "mean" : "sum"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Shape& in = input_meta()[0].shape;
    Shape kept = kept_shape(in, dims_);
    Tensor g = ops::reshape(grads[0], kept);
    if (mean_) g = ops::div(g, double(in.numel() / std::max<int64_t>(kept.numel(), 1)));
    return {ops::expand(g, in)};
  }

 private:
  std::vector<int64_t> dims_;
  bool mean_;
};

class MaxBackward final : public Node {
 public:
  MaxBackward(int64_t dim, bool keepdim) : dim_(dim), keepdim_(keepdim) {}
  const char* name() const override { return "max"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {ops::max_backward(saved(0), grads[0], input_meta()[0].shape, dim_, keepdim_)};
  }

 private:
  int64_t dim_;
  bool keepdim_;
};

class SoftmaxBackward final : public Node {
 public:
  SoftmaxBackward(int64_t dim, bool log) : dim_(dim), log_(log) {}
  const char* name() const override { return log_ ? "log_softmax" : "softmax"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {ops::softmax_backward(saved(0), grads[0], dim_, log_)};
  }

 private:
  int64_t dim_;
  bool log_;
};

Tensor sum_or_mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, bool mean) {
  Tensor out = mean ? ops::mean(x, dims, keepdim) : ops::sum(x, dims, keepdim);
  if (autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<SumBackward>(dims, mean);
    node->connect({x}, {&out});
  }
  return out;
}

Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  Tensor out = log ? ops::log_softmax(x, dim) : ops::softmax(x, dim);
  if (autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<SoftmaxBackward>(dim, log);
    node->save({out});
    node->connect({x}, {&out});
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return sum_or_mean(x, dims, keepdim, false);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return sum_or_mean(x, dims, keepdim, true);
}

ops::MaxResult max(const Tensor& x, int64_t dim, bool keepdim) {
  ops::MaxResult r = ops::max(x, dim, keepdim);
  if (autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<MaxBackward>(dim, keepdim);
    node->save({r.indices});
    node->connect({x}, {&r.values});
  }
  return r;
}

Tensor softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(x, dim, false);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return softmax_impl(x, dim, true);
}

}  // namespace tessera
