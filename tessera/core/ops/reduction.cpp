#include "tessera/core/ops/reduction.h"

#include <algorithm>

#include "tessera/core/detail/op_scope.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/detail/op_utils.h"

namespace tessera::ops {

using detail::backend;
using detail::check_defined;

namespace {

// A reduction laid out for the backend: x as contiguous [outer, r, inner] and the shape of
// the result.
struct ReducePlan {
  Tensor x3;
  int64_t outer = 1, r = 1, inner = 1;
  Shape out_shape;
};

ReducePlan plan_reduce(const Tensor& x, const std::vector<int64_t>& dims_in, bool keepdim,
                       const char* op) {
  const int nd = x.dim();
  std::vector<bool> reduced(size_t(std::max(nd, 1)), false);
  if (dims_in.empty()) {
    std::fill(reduced.begin(), reduced.end(), true);
  } else {
    for (int64_t d : dims_in) {
      int w = wrap_dim(d, nd, op);
      TESSERA_CHECK(!reduced[size_t(w)], op, ": dimension ", w, " listed twice for ", x.describe());
      reduced[size_t(w)] = true;
    }
  }
  ReducePlan p;
  for (int d = 0; d < nd; ++d) {
    if (!reduced[size_t(d)]) {
      p.out_shape.push_back(x.shape()[d]);
    } else if (keepdim) {
      p.out_shape.push_back(1);
    }
  }
  // Reduced dims forming one block [first, last] of a contiguous tensor need no copy.
  int first = -1, last = -1;
  for (int d = 0; d < nd; ++d)
    if (reduced[size_t(d)]) {
      if (first < 0) first = d;
      last = d;
    }
  bool block = first >= 0;
  for (int d = first; block && d <= last; ++d) block = reduced[size_t(d)];
  Tensor src = x;
  if (block && x.is_contiguous()) {
    for (int d = 0; d < first; ++d) p.outer *= x.shape()[d];
    for (int d = first; d <= last; ++d) p.r *= x.shape()[d];
    for (int d = last + 1; d < nd; ++d) p.inner *= x.shape()[d];
  } else {
    // Kept dims first, then reduced dims, copied contiguous.
    std::vector<int64_t> order;
    for (int d = 0; d < nd; ++d)
      if (!reduced[size_t(d)]) {
        order.push_back(d);
        p.outer *= x.shape()[d];
      }
    for (int d = 0; d < nd; ++d)
      if (reduced[size_t(d)]) {
        order.push_back(d);
        p.r *= x.shape()[d];
      }
    src = nd > 0 ? contiguous(permute(x, order)) : contiguous(x);
  }
  p.x3 = Tensor(src.storage(), Shape{p.outer, p.r, p.inner},
                contiguous_strides(Shape{p.outer, p.r, p.inner}), src.offset(), src.dtype());
  return p;
}

Tensor reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
              Tensor* indices) {
  const char* name = reduce_op_name(op);
  check_defined(name, x);
  ReducePlan p = plan_reduce(x, dims, keepdim, name);
  TESSERA_CHECK(op != ReduceOp::max || p.r > 0, "max: cannot reduce an empty dimension of ",
                x.describe());
  TESSERA_CHECK(op != ReduceOp::mean || is_floating(x.dtype()),
                "mean: input must be floating, got ", x.describe());
  Tensor out = empty(p.out_shape, x.dtype(), x.device());
  Tensor idx;
  if (op == ReduceOp::max) idx = empty(p.out_shape, DType::i64, x.device());
  Shape flat{p.outer, p.inner};
  Tensor out2(out.storage(), flat, contiguous_strides(flat), 0, out.dtype());
  Tensor idx2 = idx.defined() ? Tensor(idx.storage(), flat, contiguous_strides(flat), 0, DType::i64)
                              : Tensor();
  if (out.numel() > 0) backend(x).reduce(op, p.x3, out2, idx2);
  if (indices) *indices = idx;
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const OpScope scope("sum");
  return reduce(ReduceOp::sum, x, dims, keepdim, nullptr);
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const OpScope scope("mean");
  return reduce(ReduceOp::mean, x, dims, keepdim, nullptr);
}

MaxResult max(const Tensor& x, int64_t dim, bool keepdim) {
  const OpScope scope("max");
  check_defined("max", x);
  MaxResult r;
  r.values = reduce(ReduceOp::max, x, {dim}, keepdim, &r.indices);
  return r;
}

Tensor max_backward(const Tensor& indices, const Tensor& gy, const Shape& input_shape, int64_t dim,
                    bool keepdim) {
  const OpScope scope("max_backward");
  check_defined("max_backward", indices, "indices");
  check_defined("max_backward", gy, "gradient");
  int d = wrap_dim(dim, input_shape.size(), "max_backward");
  int64_t outer = 1, r = input_shape.size() ? input_shape[d] : 1, inner = 1;
  for (int i = 0; i < d; ++i) outer *= input_shape[i];
  for (int i = d + 1; i < input_shape.size(); ++i) inner *= input_shape[i];
  (void)keepdim;  // values were laid out [outer, inner] either way
  Tensor gx = zeros(input_shape, gy.dtype(), gy.device());
  Shape flat{outer, inner}, full{outer, r, inner};
  Tensor gy2 = reshape(contiguous(gy), flat);
  Tensor idx2 = reshape(contiguous(indices), flat);
  Tensor gx3(gx.storage(), full, contiguous_strides(full), 0, gx.dtype());
  if (gx.numel() > 0) backend(gy).max_backward(idx2, gy2, gx3);
  return gx;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  check_defined("sum_to", x);
  if (x.shape() == shape) return x;
  TESSERA_CHECK(x.dim() >= shape.size(), "sum_to: ", x.describe(), " cannot be summed to ", shape);
  int lead = x.dim() - shape.size();
  std::vector<int64_t> dims;
  for (int d = 0; d < x.dim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
    } else if (shape[d - lead] == 1 && x.shape()[d] != 1) {
      dims.push_back(d);
    } else {
      TESSERA_CHECK(shape[d - lead] == x.shape()[d], "sum_to: ", x.describe(),
                    " does not broadcast from ", shape);
    }
  }
  if (dims.empty()) return reshape(x, shape);
  return reshape(sum(x, dims, true), shape);
}

namespace {

// Moves `dim` last (copying if needed) so the backend sees contiguous rows.
Tensor rows_along(const Tensor& x, int d) {
  if (d == x.dim() - 1) return contiguous(x);
  return contiguous(transpose(x, d, x.dim() - 1));
}

Tensor from_rows(const Tensor& y, int d, int ndim) {
  if (d == ndim - 1) return y;
  return contiguous(transpose(y, d, ndim - 1));
}

Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  check_defined(name, x);
  detail::check_floating(name, x);
  if (x.dim() == 0) return reshape(softmax_impl(reshape(x, Shape{1}), 0, log), Shape{});
  int d = wrap_dim(dim, x.dim(), name);
  Tensor xr = rows_along(x, d);
  Tensor y = empty(xr.shape(), xr.dtype(), xr.device());
  int64_t n = xr.shape().back();
  Shape flat{xr.numel() / std::max<int64_t>(n, 1), n};
  if (y.numel() > 0) backend(x).softmax(reshape(xr, flat), reshape(y, flat), log);
  return from_rows(y, d, x.dim());
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  const OpScope scope("softmax");
  return softmax_impl(x, dim, false);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  const OpScope scope("log_softmax");
  return softmax_impl(x, dim, true);
}

Tensor softmax_backward(const Tensor& y, const Tensor& gy, int64_t dim, bool log) {
  const OpScope scope("softmax_backward");
  const char* name = log ? "log_softmax_backward" : "softmax_backward";
  check_defined(name, y, "output");
  check_defined(name, gy, "gradient");
  TESSERA_CHECK(y.shape() == gy.shape(), name, ": gradient ", gy.describe(),
                " does not match output ", y.describe());
  if (y.dim() == 0)
    return reshape(softmax_backward(reshape(y, Shape{1}), reshape(gy, Shape{1}), 0, log), Shape{});
  int d = wrap_dim(dim, y.dim(), name);
  Tensor yr = rows_along(y, d), gr = rows_along(cast(gy, y.dtype()), d);
  Tensor gx = empty(yr.shape(), yr.dtype(), yr.device());
  int64_t n = yr.shape().back();
  Shape flat{yr.numel() / std::max<int64_t>(n, 1), n};
  if (gx.numel() > 0)
    backend(y).softmax_backward(reshape(yr, flat), reshape(gr, flat), reshape(gx, flat), log);
  return from_rows(gx, d, y.dim());
}

Tensor squared_norm(const std::vector<Tensor>& xs) {
  const OpScope scope("squared_norm");
  TESSERA_CHECK(!xs.empty(), "squared_norm: expected at least one tensor");
  std::vector<Tensor> dense;
  for (size_t i = 0; i < xs.size(); ++i) {
    check_defined("squared_norm", xs[i]);
    detail::check_floating("squared_norm", xs[i]);
    TESSERA_CHECK(xs[i].device() == xs[0].device(), "squared_norm: tensor ", i, " (",
                  xs[i].describe(), ") is on a different device than tensor 0 (", xs[0].describe(),
                  ")");
    dense.push_back(contiguous(xs[i]));
  }
  Tensor out = empty(Shape{}, DType::f32, xs[0].device());
  backend(xs[0]).squared_norm(dense, out);
  return out;
}

}  // namespace tessera::ops
