// The tensor-parallel regions as autograd Functions. Collectives along a dim other than 0 go
// through a permuted copy: x [A, S, B] (A the dims before, B the dims after) is gathered as
// size flat chunks [size, A, S, B] and permuted to [A, size, S, B]; a reduce-scatter permutes
// its input the other way first. Each is one pass over the data, against a collective that
// moves (size - 1) / size of it over the network, so the copies are not the bound.

#include "tessera/parallel/tp/detail/regions.h"

#include <vector>

#include "tessera/autograd/function.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"

namespace tessera::parallel::tp {

namespace {

// x viewed as [A, S, B] around dim d.
struct Around {
  int64_t a = 1, s = 1, b = 1;
};

int64_t normalize_dim(const Tensor& x, int64_t dim, const char* what) {
  TESSERA_CHECK(x.defined(), what, ": the tensor is undefined");
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  TESSERA_CHECK(d >= 0 && d < x.dim(), what, ": dim ", dim, " is out of range for ",
                x.describe());
  return d;
}

Around around(const Tensor& x, int64_t d) {
  Around r;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < d) r.a *= x.size(i);
    if (i == d) r.s = x.size(i);
    if (i > d) r.b *= x.size(i);
  }
  return r;
}

// The dtype a sum over the group runs in: bf16 and f16 (mixed-precision activations) are
// summed in f32 and rounded once at the end; MPI cannot reduce 16-bit floats.
DType sum_dtype(const Tensor& x) {
  return x.dtype() == DType::bf16 || x.dtype() == DType::f16 ? DType::f32 : x.dtype();
}

void check_divides(const Tensor& x, int64_t d, const Communicator& group, const char* what) {
  TESSERA_CHECK(x.size(d) % group.size() == 0, what, ": dim ", d, " of ", x.describe(), " (",
                x.size(d), ") does not divide over the ", group.size(), " ranks of group ",
                group.name());
}

}  // namespace

Tensor all_gather_along(const Tensor& x, int64_t dim, Communicator& group) {
  const int64_t d = normalize_dim(x, dim, "all_gather_along");
  const int64_t t = group.size();
  const Around g = around(x, d);
  Tensor flat = empty(Shape{t * x.numel()}, x.dtype(), x.device());
  group.all_gather(ops::contiguous(x), flat);
  Shape out = x.shape();
  out[int(d)] = t * g.s;
  if (g.a == 1) return ops::view(flat, out);
  Tensor parts = ops::view(flat, Shape{t, g.a, g.s, g.b});
  return ops::view(ops::contiguous(ops::permute(parts, {1, 0, 2, 3})), out);
}

Tensor reduce_scatter_along(const Tensor& x, int64_t dim, Communicator& group) {
  const int64_t d = normalize_dim(x, dim, "reduce_scatter_along");
  check_divides(x, d, group, "reduce_scatter_along");
  const int64_t t = group.size();
  const Around g = around(x, d);
  const int64_t s = g.s / t;
  const DType sum = sum_dtype(x);
  Tensor in = ops::contiguous(ops::cast(x, sum));
  if (g.a != 1)
    in = ops::contiguous(ops::permute(ops::view(in, Shape{g.a, t, s, g.b}), {1, 0, 2, 3}));
  Tensor flat = empty(Shape{g.a * s * g.b}, sum, x.device());
  group.reduce_scatter(in, flat);
  Shape out = x.shape();
  out[int(d)] = s;
  return ops::view(ops::cast(flat, x.dtype()), out);
}

Tensor slice_along(const Tensor& x, int64_t dim, const Communicator& group) {
  const int64_t d = normalize_dim(x, dim, "slice_along");
  check_divides(x, d, group, "slice_along");
  const int64_t s = x.size(d) / group.size();
  return ops::clone(ops::narrow(x, d, int64_t(group.rank()) * s, s));
}

Tensor all_reduce_copy(const Tensor& x, Communicator& group) {
  const DType sum = sum_dtype(x);
  if (sum != x.dtype()) {
    Tensor y = ops::contiguous(ops::cast(x, sum));
    group.all_reduce(y);
    return ops::cast(y, x.dtype());
  }
  Tensor y = ops::clone(x);
  group.all_reduce(y);
  return y;
}

namespace {

using autograd::Function;

// A Function over a group, along a dim where it has one.
class RegionFunction : public Function {
 public:
  RegionFunction(std::shared_ptr<Communicator> group, int64_t dim)
      : group_(std::move(group)), dim_(dim) {}

 protected:
  std::shared_ptr<Communicator> group_;
  int64_t dim_;
};

class CopyToRegion final : public RegionFunction {
 public:
  using RegionFunction::RegionFunction;
  const char* name() const override { return "copy_to_region"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0]}; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return {all_reduce_copy(g[0], *group_)};
  }
};

class ReduceFromRegion final : public RegionFunction {
 public:
  using RegionFunction::RegionFunction;
  const char* name() const override { return "reduce_from_region"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    return {all_reduce_copy(in[0], *group_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override { return {g[0]}; }
};

class GatherFromRegion final : public RegionFunction {
 public:
  using RegionFunction::RegionFunction;
  const char* name() const override { return "gather_from_region"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    return {all_gather_along(in[0], dim_, *group_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return {slice_along(g[0], dim_, *group_)};
  }
};

class ScatterToRegion final : public RegionFunction {
 public:
  using RegionFunction::RegionFunction;
  const char* name() const override { return "scatter_to_region"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    return {slice_along(in[0], dim_, *group_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return {all_gather_along(g[0], dim_, *group_)};
  }
};

class SequenceGather final : public RegionFunction {
 public:
  using RegionFunction::RegionFunction;
  const char* name() const override { return "sequence_gather"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    return {all_gather_along(in[0], dim_, *group_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return {reduce_scatter_along(g[0], dim_, *group_)};
  }
};

class SequenceReduceScatter final : public RegionFunction {
 public:
  using RegionFunction::RegionFunction;
  const char* name() const override { return "sequence_reduce_scatter"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    return {reduce_scatter_along(in[0], dim_, *group_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    return {all_gather_along(g[0], dim_, *group_)};
  }
};

template <class F>
Tensor apply(const Tensor& x, const std::shared_ptr<Communicator>& group, int64_t dim,
             const char* what) {
  TESSERA_CHECK(group != nullptr, what, ": the group is null");
  TESSERA_CHECK(x.defined(), what, ": the tensor is undefined");
  if (group->size() == 1) return x;
  return autograd::apply_function(std::make_shared<F>(group, dim), {x})[0];
}

}  // namespace

Tensor copy_to_region(const Tensor& x, const std::shared_ptr<Communicator>& group) {
  return apply<CopyToRegion>(x, group, 0, "copy_to_region");
}

Tensor reduce_from_region(const Tensor& x, const std::shared_ptr<Communicator>& group) {
  return apply<ReduceFromRegion>(x, group, 0, "reduce_from_region");
}

Tensor gather_from_region(const Tensor& x, int64_t dim,
                          const std::shared_ptr<Communicator>& group) {
  return apply<GatherFromRegion>(x, group, dim, "gather_from_region");
}

Tensor scatter_to_region(const Tensor& x, int64_t dim, const std::shared_ptr<Communicator>& group) {
  return apply<ScatterToRegion>(x, group, dim, "scatter_to_region");
}

Tensor sequence_gather(const Tensor& x, const std::shared_ptr<Communicator>& group, int64_t dim) {
  return apply<SequenceGather>(x, group, dim, "sequence_gather");
}

Tensor sequence_reduce_scatter(const Tensor& x, const std::shared_ptr<Communicator>& group,
                               int64_t dim) {
  return apply<SequenceReduceScatter>(x, group, dim, "sequence_reduce_scatter");
}

}  // namespace tessera::parallel::tp
