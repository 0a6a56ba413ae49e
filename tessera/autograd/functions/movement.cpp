// Backward formulas for views and data movement. Reshape-likes reshape the gradient back,
// transpose/permute apply the inverse permutation, sub-views (slice, narrow, select) scatter
// the gradient into zeros of the input's shape, expand sums back, cast and to() convert back,
// cat splits the gradient and split concatenates its pieces' gradients.

#include "tessera/autograd/functions/movement.h"

#include <functional>

#include "tessera/autograd/node.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/reduction.h"

namespace tessera {

namespace {

using autograd::Node;

// Any op whose output holds the same elements in the same row-major order (view, reshape,
// squeeze, unsqueeze, flatten, contiguous): the gradient only takes the input's shape again.
class ReshapeBackward final : public Node {
 public:
  explicit ReshapeBackward(const char* name) : name_(name) {}
  const char* name() const override { return name_; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {ops::reshape(grads[0], input_meta()[0].shape)};
  }

 private:
  const char* name_;
};

class PermuteBackward final : public Node {
 public:
  PermuteBackward(const char* name, std::vector<int64_t> inverse)
      : name_(name), inverse_(std::move(inverse)) {}
  const char* name() const override { return name_; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {ops::permute(grads[0], inverse_)};
  }

 private:
  const char* name_;
  std::vector<int64_t> inverse_;
};

// A sub-view: the gradient lands in the same view of a zero tensor shaped like the input.
class SubviewBackward final : public Node {
 public:
  using ViewFn = std::function<Tensor(const Tensor&)>;
  SubviewBackward(const char* name, ViewFn view) : name_(name), view_(std::move(view)) {}
  const char* name() const override { return name_; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const autograd::TensorMeta& in = input_meta()[0];
    Tensor gx = zeros(in.shape, grads[0].dtype(), in.device);
    ops::copy_(view_(gx), grads[0]);
    return {gx};
  }

 private:
  const char* name_;
  ViewFn view_;
};

class ExpandBackward final : public Node {
 public:
  const char* name() const override { return "expand"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {ops::sum_to(grads[0], input_meta()[0].shape)};
  }
};

class CastBackward final : public Node {
 public:
  const char* name() const override { return "cast"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {ops::cast(grads[0], input_meta()[0].dtype)};
  }
};

class ToBackward final : public Node {
 public:
  const char* name() const override { return "to"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {ops::to(grads[0], input_meta()[0].device)};
  }
};

class CatBackward final : public Node {
 public:
  explicit CatBackward(int dim) : dim_(dim) {}
  const char* name() const override { return "cat"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    std::vector<int64_t> sizes;
    for (const autograd::TensorMeta& m : input_meta()) sizes.push_back(m.shape[dim_]);
    std::vector<Tensor> pieces = ops::split(grads[0], sizes, dim_);
    for (size_t i = 0; i < pieces.size(); ++i)
      if (!needs_input_grad(i)) pieces[i] = Tensor();
    return pieces;
  }

 private:
  int dim_;
};

// One node for all pieces; the engine hands zeros for pieces no gradient reached.
class SplitBackward final : public Node {
 public:
  explicit SplitBackward(int dim) : dim_(dim) {}
  const char* name() const override { return "split"; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {ops::cat(grads, dim_)};
  }

 private:
  int dim_;
};

// Connects `node` when x needs a gradient; returns out.
template <class N, class... Args>
Tensor record(const Tensor& x, Tensor out, Args&&... args) {
  if (autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<N>(std::forward<Args>(args)...);
    node->connect({x}, {&out});
  }
  return out;
}

Tensor subview(const char* name, const Tensor& x, const SubviewBackward::ViewFn& view) {
  return record<SubviewBackward>(x, view(x), name, view);
}

}  // namespace

Tensor view(const Tensor& x, const Shape& shape) {
  return record<ReshapeBackward>(x, ops::view(x, shape), "view");
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  return record<ReshapeBackward>(x, ops::reshape(x, shape), "reshape");
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  return record<ReshapeBackward>(x, ops::squeeze(x, dim), "squeeze");
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  return record<ReshapeBackward>(x, ops::unsqueeze(x, dim), "unsqueeze");
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  return record<ReshapeBackward>(x, ops::flatten(x, start_dim, end_dim), "flatten");
}

Tensor contiguous(const Tensor& x) {
  Tensor out = ops::contiguous(x);
  if (out.is_same(x)) return x;
  return record<ReshapeBackward>(x, out, "contiguous");
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  Tensor out = ops::transpose(x, dim0, dim1);
  // A transposition is its own inverse.
  std::vector<int64_t> inverse(static_cast<size_t>(x.dim()));
  for (int i = 0; i < x.dim(); ++i) inverse[size_t(i)] = i;
  if (x.dim() > 0)  // a 0-d tensor accepts dims 0 and -1 and stays as it is
    std::swap(inverse[size_t(wrap_dim(dim0, x.dim(), "transpose"))],
              inverse[size_t(wrap_dim(dim1, x.dim(), "transpose"))]);
  return record<PermuteBackward>(x, out, "transpose", std::move(inverse));
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  Tensor out = ops::permute(x, dims);
  // Output dim i is input dim dims[i], so the gradient's dim i goes back to place dims[i].
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i)
    inverse[size_t(wrap_dim(dims[i], x.dim(), "permute"))] = int64_t(i);
  return record<PermuteBackward>(x, out, "permute", std::move(inverse));
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return subview("slice", x, [=](const Tensor& t) { return ops::slice(t, dim, start, end, step); });
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  return subview("narrow", x, [=](const Tensor& t) { return ops::narrow(t, dim, start, length); });
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  return subview("select", x, [=](const Tensor& t) { return ops::select(t, dim, index); });
}

Tensor expand(const Tensor& x, const Shape& shape) {
  return record<ExpandBackward>(x, ops::expand(x, shape));
}

Tensor cast(const Tensor& x, DType dtype) {
  Tensor out = ops::cast(x, dtype);
  // Integer results carry no gradient.
  if (out.is_same(x) || !is_floating(dtype)) return out;
  return record<CastBackward>(x, out);
}

Tensor to(const Tensor& x, Device device) {
  Tensor out = ops::to(x, device);
  if (out.is_same(x)) return x;
  return record<ToBackward>(x, out);
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  Tensor out = ops::cat(xs, dim);
  if (autograd::any_requires_grad(xs)) {
    auto node = std::make_shared<CatBackward>(wrap_dim(dim, xs[0].dim(), "cat"));
    node->connect(xs, {&out});
  }
  return out;
}

namespace {

std::vector<Tensor> record_split(const Tensor& x, std::vector<Tensor> pieces, int64_t dim) {
  if (!pieces.empty() && autograd::any_requires_grad({&x})) {
    auto node = std::make_shared<SplitBackward>(wrap_dim(dim, x.dim(), "split"));
    std::vector<Tensor*> outs;
    for (Tensor& p : pieces) outs.push_back(&p);
    node->connect({x}, outs);
  }
  return pieces;
}

}  // namespace

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim) {
  return record_split(x, ops::split(x, size, dim), dim);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  return record_split(x, ops::split(x, sizes, dim), dim);
}

}  // namespace tessera
