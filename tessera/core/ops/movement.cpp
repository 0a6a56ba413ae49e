#include "tessera/core/ops/movement.h"

#include <algorithm>

#include "tessera/core/detail/op_scope.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/detail/op_utils.h"

namespace tessera::ops {

using detail::backend;
using detail::check_defined;

Tensor as_strided(const Tensor& x, const Shape& shape, const Strides& strides, int64_t offset) {
  check_defined("as_strided", x);
  TESSERA_CHECK(shape.size() == strides.size(), "as_strided: shape ", shape, " and strides ",
                strides, " differ in rank");
  int64_t lo = offset, hi = offset;
  for (int i = 0; i < shape.size(); ++i) {
    TESSERA_CHECK(shape[i] >= 0, "as_strided: negative dimension in shape ", shape);
    if (shape[i] == 0) {
      lo = hi = offset;
      break;
    }
    int64_t span = (shape[i] - 1) * strides[i];
    (span >= 0 ? hi : lo) += span;
  }
  int64_t capacity = int64_t(x.storage()->nbytes() / x.itemsize());
  TESSERA_CHECK(lo >= 0 && (shape.numel() == 0 || hi < capacity), "as_strided: view ", shape,
                " strides ", strides, " offset ", offset, " reaches outside storage of ", capacity,
                " elements of ", x.describe());
  Tensor out(x.storage(), shape, strides, offset, x.dtype());
  return out;
}

namespace {

// Resolves one -1 entry against numel.
Shape infer_shape(const Shape& shape, int64_t numel, const char* op, const Tensor& x) {
  Shape out = shape;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      TESSERA_CHECK(infer < 0, op, ": only one dimension may be -1 in ", shape);
      infer = i;
    } else {
      TESSERA_CHECK(out[i] >= 0, op, ": invalid dimension ", out[i], " in ", shape);
      known *= out[i];
    }
  }
  if (infer >= 0) {
    TESSERA_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape, " is invalid for input ",
                  x.describe());
    out[infer] = numel / known;
  }
  TESSERA_CHECK(out.numel() == numel, op, ": shape ", shape, " is invalid for input ", x.describe(),
                " (", numel, " elements)");
  return out;
}

// Strides for viewing x as `shape` without copying, if its layout allows (false otherwise).
// Old dims are grouped into chunks that are contiguous among themselves; each chunk must map
// onto a run of new dims with the same element count.
bool view_strides(const Tensor& x, const Shape& shape, Strides& out) {
  const Shape& old = x.shape();
  const Strides& ost = x.strides();
  if (x.numel() == 0 || old.size() == 0) {
    out = contiguous_strides(shape);
    return true;
  }
  out = Strides::filled(shape.size(), 0);
  int view_d = shape.size() - 1;
  int64_t chunk_base_stride = ost.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int tensor_d = old.size() - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= old[tensor_d];
    bool chunk_ends = tensor_d == 0 || (old[tensor_d - 1] != 1 &&
                                        ost[tensor_d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
      out[view_d] = view_numel * chunk_base_stride;
      view_numel *= shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return false;
    if (tensor_d > 0) {
      chunk_base_stride = ost[tensor_d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  return view_d == -1;
}

}  // namespace

Tensor view(const Tensor& x, const Shape& shape) {
  check_defined("view", x);
  Shape s = infer_shape(shape, x.numel(), "view", x);
  Strides st;
  TESSERA_CHECK(view_strides(x, s, st), "view: ", x.describe(), " with strides ", x.strides(),
                " cannot be viewed as ", s, " without a copy; use reshape()");
  return Tensor(x.storage(), s, st, x.offset(), x.dtype());
}

Tensor reshape(const Tensor& x, const Shape& shape) {
  check_defined("reshape", x);
  Shape s = infer_shape(shape, x.numel(), "reshape", x);
  Strides st;
  if (view_strides(x, s, st)) return Tensor(x.storage(), s, st, x.offset(), x.dtype());
  Tensor c = contiguous(x);
  return Tensor(c.storage(), s, contiguous_strides(s), c.offset(), c.dtype());
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  check_defined("transpose", x);
  int a = wrap_dim(dim0, x.dim(), "transpose"), b = wrap_dim(dim1, x.dim(), "transpose");
  Shape s = x.shape();
  Strides st = x.strides();
  std::swap(s[a], s[b]);
  std::swap(st[a], st[b]);
  return Tensor(x.storage(), s, st, x.offset(), x.dtype());
}

Tensor permute(const Tensor& x, const std::vector<int64_t>& dims) {
  check_defined("permute", x);
  TESSERA_CHECK(int(dims.size()) == x.dim(), "permute: ", dims.size(), " dims given for ",
                x.describe());
  Shape s = Shape::filled(x.dim(), 0);
  Strides st = Strides::filled(x.dim(), 0);
  std::vector<bool> seen(x.dim(), false);
  for (int i = 0; i < x.dim(); ++i) {
    int d = wrap_dim(dims[i], x.dim(), "permute");
    TESSERA_CHECK(!seen[d], "permute: dimension ", d, " repeated for ", x.describe());
    seen[d] = true;
    s[i] = x.shape()[d];
    st[i] = x.strides()[d];
  }
  return Tensor(x.storage(), s, st, x.offset(), x.dtype());
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  check_defined("slice", x);
  TESSERA_CHECK(x.dim() > 0, "slice: cannot slice a 0-d tensor");
  int d = wrap_dim(dim, x.dim(), "slice");
  TESSERA_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t n = x.shape()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = x.shape();
  Strides st = x.strides();
  s[d] = (end - start + step - 1) / step;
  st[d] *= step;
  return Tensor(x.storage(), s, st, x.offset() + start * x.strides()[d], x.dtype());
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  check_defined("narrow", x);
  int d = wrap_dim(dim, x.dim(), "narrow");
  int64_t n = x.shape()[d];
  TESSERA_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: range [", start, ", ",
                start + length, ") is outside dimension ", d, " of ", x.describe());
  return slice(x, d, start, start + length);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  check_defined("select", x);
  int d = wrap_dim(dim, x.dim(), "select");
  int64_t n = x.shape()[d];
  TESSERA_CHECK(index >= -n && index < n, "select: index ", index,
                " is out of range for dimension ", d, " of ", x.describe());
  if (index < 0) index += n;
  Shape s = x.shape();
  Strides st = x.strides();
  int64_t offset = x.offset() + index * st[d];
  s.erase(d);
  st.erase(d);
  return Tensor(x.storage(), s, st, offset, x.dtype());
}

Tensor expand(const Tensor& x, const Shape& shape) {
  check_defined("expand", x);
  TESSERA_CHECK(shape.size() >= x.dim(), "expand: cannot expand ", x.describe(), " to ", shape);
  Strides st = Strides::filled(shape.size(), 0);
  int lead = shape.size() - x.dim();
  for (int i = 0; i < x.dim(); ++i) {
    int64_t have = x.shape()[i], want = shape[lead + i];
    if (have == want) {
      st[lead + i] = x.strides()[i];
    } else {
      TESSERA_CHECK(have == 1, "expand: cannot expand ", x.describe(), " to ", shape,
                    " (dimension ", i, " is ", have, ", not 1)");
    }
  }
  return Tensor(x.storage(), shape, st, x.offset(), x.dtype());
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  check_defined("squeeze", x);
  int d = wrap_dim(dim, x.dim(), "squeeze");
  TESSERA_CHECK(x.shape()[d] == 1, "squeeze: dimension ", d, " of ", x.describe(), " is not 1");
  Shape s = x.shape();
  Strides st = x.strides();
  s.erase(d);
  st.erase(d);
  return Tensor(x.storage(), s, st, x.offset(), x.dtype());
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  check_defined("unsqueeze", x);
  int d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape s = x.shape();
  Strides st = x.strides();
  int64_t stride = d < x.dim() ? st[d] * s[d] : 1;
  s.insert(d, 1);
  st.insert(d, stride);
  return Tensor(x.storage(), s, st, x.offset(), x.dtype());
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  check_defined("flatten", x);
  if (x.dim() == 0) return reshape(x, Shape{1});
  int a = wrap_dim(start_dim, x.dim(), "flatten"), b = wrap_dim(end_dim, x.dim(), "flatten");
  TESSERA_CHECK(a <= b, "flatten: start_dim ", a, " is after end_dim ", b);
  Shape s;
  for (int i = 0; i < a; ++i) s.push_back(x.shape()[i]);
  int64_t merged = 1;
  for (int i = a; i <= b; ++i) merged *= x.shape()[i];
  s.push_back(merged);
  for (int i = b + 1; i < x.dim(); ++i) s.push_back(x.shape()[i]);
  return reshape(x, s);
}

Tensor clone(const Tensor& x) {
  const OpScope scope("clone");
  check_defined("clone", x);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (x.numel() > 0) backend(x).copy(x, out);
  return out;
}

Tensor contiguous(const Tensor& x) {
  const OpScope scope("contiguous");
  check_defined("contiguous", x);
  return x.is_contiguous() ? x : clone(x);
}

Tensor cast(const Tensor& x, DType dtype) {
  const OpScope scope("cast");
  check_defined("cast", x);
  if (x.dtype() == dtype) return x;
  Tensor out = empty(x.shape(), dtype, x.device());
  if (x.numel() > 0) backend(x).copy(x, out);
  return out;
}

Tensor to(const Tensor& x, Device device) {
  const OpScope scope("to");
  check_defined("to", x);
  if (x.device() == device) return x;
  Tensor src = contiguous(x);
  Tensor out = empty(x.shape(), x.dtype(), device);
  if (x.numel() > 0) {
    Backend& b = device.is_cpu() ? backend_for(x.device()) : backend_for(device);
    b.copy_host(src, out);
  }
  return out;
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  const OpScope scope("cat");
  TESSERA_CHECK(!xs.empty(), "cat: expected at least one tensor");
  for (const Tensor& t : xs) check_defined("cat", t);
  const Tensor& first = xs[0];
  int d = wrap_dim(dim, first.dim(), "cat");
  DType dtype = first.dtype();
  Shape s = first.shape();
  int64_t total = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& t = xs[i];
    TESSERA_CHECK(t.dim() == first.dim(), "cat: tensor ", i, " (", t.describe(),
                  ") has a different rank than tensor 0 (", first.describe(), ")");
    TESSERA_CHECK(t.device() == first.device(), "cat: tensor ", i, " (", t.describe(),
                  ") is on a different device than tensor 0 (", first.describe(), ")");
    for (int k = 0; k < s.size(); ++k)
      TESSERA_CHECK(k == d || t.shape()[k] == s[k], "cat: tensor ", i, " (", t.describe(),
                    ") does not match tensor 0 (", first.describe(), ") outside dim ", d);
    dtype = promote_types(dtype, t.dtype());
    total += t.shape()[d];
  }
  s[d] = total;
  Tensor out = empty(s, dtype, first.device());
  int64_t pos = 0;
  for (const Tensor& t : xs) {
    int64_t n = t.shape()[d];
    if (n > 0 && t.numel() > 0) backend(t).copy(t, narrow(out, d, pos, n));
    pos += n;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim) {
  const OpScope scope("split");
  check_defined("split", x);
  TESSERA_CHECK(size > 0, "split: piece size must be positive, got ", size);
  int d = wrap_dim(dim, x.dim(), "split");
  std::vector<Tensor> out;
  for (int64_t pos = 0; pos < x.shape()[d]; pos += size)
    out.push_back(narrow(x, d, pos, std::min(size, x.shape()[d] - pos)));
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  const OpScope scope("split");
  check_defined("split", x);
  int d = wrap_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    TESSERA_CHECK(s >= 0, "split: negative piece size ", s);
    total += s;
  }
  TESSERA_CHECK(total == x.shape()[d], "split: sizes sum to ", total, " but dimension ", d, " of ",
                x.describe(), " is ", x.shape()[d]);
  std::vector<Tensor> out;
  int64_t pos = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(x, d, pos, s));
    pos += s;
  }
  return out;
}

void copy_(const Tensor& dst, const Tensor& src) {
  const OpScope scope("copy_");
  check_defined("copy_", dst, "destination");
  check_defined("copy_", src, "source");
  Tensor s = src;
  if (src.device() != dst.device()) s = to(src, dst.device());
  s = expand(s, dst.shape());
  if (dst.numel() > 0) backend(dst).copy(s, dst);
  dst.storage()->bump_version();
}

void fill_(const Tensor& dst, double value) {
  check_defined("fill_", dst);
  if (dst.numel() > 0) backend(dst).fill(dst, value);
  dst.storage()->bump_version();
}

void zero_(const Tensor& dst) {
  fill_(dst, 0.0);
}

}  // namespace tessera::ops
