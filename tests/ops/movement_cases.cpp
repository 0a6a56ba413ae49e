// Harness cases for views and data movement: reshape, view, transpose, permute, slice (with
// narrow and select), expand, contiguous, cat and split (cast is with the creation cases, next
// to the other dtype conversions). References index plain host arrays; the op's arguments
// travel as an i64 tensor so each trial can draw its own.

#include <algorithm>

#include "ops/harness.h"

namespace tessera::testing {
namespace {

Tensor args_tensor(const std::vector<int64_t>& v) {
  return from_vector<int64_t>(v, Shape{int64_t(v.size())});
}

std::vector<int64_t> args_of(const Tensor& t) {
  return to_vector<int64_t>(t);
}

Shape shape_of(const Tensor& args) {
  return Shape(std::span<const int64_t>(args_of(args)));
}

// A dimension index, negative half the time.
int64_t random_dim(CaseRng& rng, int ndim) {
  int64_t d = rng.size(0, ndim - 1);
  return rng.coin() ? d - ndim : d;
}

int wrap(int64_t d, int ndim) {
  return int(d < 0 ? d + ndim : d);
}

// Splits n into up to `max_dims` factors at random (1s included), for reshape targets.
std::vector<int64_t> random_factors(CaseRng& rng, int64_t n, int max_dims) {
  std::vector<int64_t> primes;
  for (int64_t p = 2; n > 1; ++p)
    while (n % p == 0) {
      primes.push_back(p);
      n /= p;
    }
  std::vector<int64_t> dims(size_t(rng.size(1, max_dims)), 1);
  for (int64_t p : primes) dims[size_t(rng.size(0, int64_t(dims.size()) - 1))] *= p;
  return dims;
}

// out[..., j, ...] = x[..., idx[j], ...] along dim d.
HostTensor index_along(const HostTensor& x, int d, const std::vector<int64_t>& idx) {
  Shape s = x.shape;
  s[d] = int64_t(idx.size());
  HostTensor out(s);
  for_each_index(s, [&](const std::vector<int64_t>& i) {
    std::vector<int64_t> src = i;
    src[size_t(d)] = idx[size_t(i[size_t(d)])];
    out.at(i) = x.at(src);
  });
  return out;
}

std::vector<int64_t> range(int64_t start, int64_t end, int64_t step = 1) {
  std::vector<int64_t> v;
  for (int64_t i = start; i < end; i += step) v.push_back(i);
  return v;
}

// out's dim k is x's dim perm[k] (negative entries count from the end).
Tensor host_permute(const HostTensor& x, const std::vector<int64_t>& perm) {
  int nd = x.shape.size();
  Shape s;
  for (int64_t d : perm) s.push_back(x.shape[wrap(d, nd)]);
  HostTensor out(s);
  for_each_index(s, [&](const std::vector<int64_t>& i) {
    std::vector<int64_t> src(static_cast<size_t>(nd), 0);
    for (int k = 0; k < nd; ++k) src[size_t(wrap(perm[size_t(k)], nd))] = i[size_t(k)];
    out.at(i) = x.at(src);
  });
  return out.to_tensor();
}

HostTensor host_cat(const std::vector<HostTensor>& xs, int d) {
  Shape s = xs[0].shape;
  s[d] = 0;
  for (const HostTensor& x : xs) s[d] += x.shape[d];
  HostTensor out(s);
  int64_t pos = 0;
  for (const HostTensor& x : xs) {
    for_each_index(x.shape, [&](const std::vector<int64_t>& i) {
      std::vector<int64_t> dst = i;
      dst[size_t(d)] += pos;
      out.at(dst) = x.at(i);
    });
    pos += x.shape[d];
  }
  return out;
}

// Same values in row-major order under a new shape.
Tensor with_shape(const HostTensor& x, const Shape& s) {
  HostTensor out(s);
  out.v = x.v;
  return out.to_tensor();
}

// Fills in a -1 entry from numel.
Shape resolve(Shape s, int64_t numel) {
  int64_t known = 1;
  int infer = -1;
  for (int i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      infer = i;
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) s[infer] = numel / known;
  return s;
}

}  // namespace

namespace {

// reshape and view: the same values under a new shape (one entry may be -1). For view the
// input keeps a layout that allows it: contiguous, or every other row of a contiguous buffer
// (dim 0 then cannot merge, the rest can be refactored).
OpCase reshape_case(const std::string& name, bool is_view) {
  OpCase c;
  c.name = name;
  c.make_inputs = [is_view](CaseRng& rng, DType dt) {
    Shape s = rng.shape(int(rng.size(is_view ? 1 : 0, 4)), 1, 5);
    Tensor x = rng.tensor(s, dt);  // reshape: often non-contiguous, so it copies
    std::vector<int64_t> target = random_factors(rng, x.numel(), 4);
    if (is_view && rng.coin()) {
      x = ops::contiguous(x);
    } else if (is_view) {
      Shape wide = s;
      wide[0] = 2 * s[0];
      x = ops::slice(ops::contiguous(rng.tensor(wide, dt)), 0, 0, 2 * s[0], 2);
      target = random_factors(rng, x.numel() / s[0], 3);
      target.insert(target.begin(), s[0]);
    }
    if (rng.coin()) target[size_t(rng.size(0, int64_t(target.size()) - 1))] = -1;
    return std::vector<Tensor>{x, args_tensor(target)};
  };
  c.run = [is_view](const std::vector<Tensor>& in) {
    Shape s = shape_of(in[1]);
    if (!is_view) return tessera::reshape(in[0], s);
    Tensor y = tessera::view(in[0], s);
    TESSERA_CHECK(y.storage() == in[0].storage(), "view copied ", in[0].describe());
    return y;
  };
  c.reference = [](const std::vector<Tensor>& in) {
    return with_shape(HostTensor(in[0]), resolve(shape_of(in[1]), in[0].numel()));
  };
  c.grad_inputs = {0};
  return c;
}

}  // namespace

TESSERA_OP_CASE(reshape) {
  return reshape_case("reshape", false);
}
TESSERA_OP_CASE(view) {
  return reshape_case("view", true);
}

TESSERA_OP_CASE(transpose) {
  OpCase c;
  c.name = "transpose";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    int nd = int(rng.size(1, 4));
    Tensor x = rng.tensor(rng.shape(nd, 1, 5), dt);
    return std::vector<Tensor>{x, args_tensor({random_dim(rng, nd), random_dim(rng, nd)})};
  };
  c.run = [](const std::vector<Tensor>& in) {
    std::vector<int64_t> a = args_of(in[1]);
    return tessera::transpose(in[0], a[0], a[1]);
  };
  c.reference = [](const std::vector<Tensor>& in) {
    std::vector<int64_t> a = args_of(in[1]);
    HostTensor x(in[0]);
    std::vector<int64_t> perm = range(0, x.shape.size());
    std::swap(perm[size_t(wrap(a[0], x.shape.size()))], perm[size_t(wrap(a[1], x.shape.size()))]);
    return host_permute(x, perm);
  };
  c.grad_inputs = {0};
  return c;
}

TESSERA_OP_CASE(permute) {
  OpCase c;
  c.name = "permute";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    int nd = int(rng.size(1, 5));
    Tensor x = rng.tensor(rng.shape(nd, 1, 4), dt);
    std::vector<int64_t> perm = range(0, nd);
    std::shuffle(perm.begin(), perm.end(), rng.engine());
    for (int64_t& d : perm)
      if (rng.coin()) d -= nd;
    return std::vector<Tensor>{x, args_tensor(perm)};
  };
  c.run = [](const std::vector<Tensor>& in) { return tessera::permute(in[0], args_of(in[1])); };
  c.reference = [](const std::vector<Tensor>& in) {
    return host_permute(HostTensor(in[0]), args_of(in[1]));
  };
  c.grad_inputs = {0};
  return c;
}

// slice, narrow and select: all sub-views whose gradient is scattered back into zeros.
TESSERA_OP_CASE(slice) {
  enum Kind : int64_t { kSlice, kNarrow, kSelect };
  OpCase c;
  c.name = "slice";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    int nd = int(rng.size(1, 3));
    Shape s = rng.shape(nd, 1, 7);
    Tensor x = rng.tensor(s, dt);
    int64_t dim = random_dim(rng, nd), n = s[wrap(dim, nd)];
    int64_t kind = rng.size(0, 2);
    std::vector<int64_t> a = {kind, dim};
    if (kind == kSlice) {
      // Python-style bounds: negative, past the end, or empty ranges.
      a.push_back(rng.size(-n - 2, n + 2));
      a.push_back(rng.size(-n - 2, n + 2));
      a.push_back(rng.size(1, 3));
    } else if (kind == kNarrow) {
      int64_t start = rng.size(0, n);
      a.push_back(start);
      a.push_back(rng.size(0, n - start));
    } else {
      a.push_back(rng.size(-n, n - 1));
    }
    return std::vector<Tensor>{x, args_tensor(a)};
  };
  c.run = [](const std::vector<Tensor>& in) {
    std::vector<int64_t> a = args_of(in[1]);
    switch (a[0]) {
      case kSlice:
        return tessera::slice(in[0], a[1], a[2], a[3], a[4]);
      case kNarrow:
        return tessera::narrow(in[0], a[1], a[2], a[3]);
      default:
        return tessera::select(in[0], a[1], a[2]);
    }
  };
  c.reference = [](const std::vector<Tensor>& in) {
    std::vector<int64_t> a = args_of(in[1]);
    HostTensor x(in[0]);
    int d = wrap(a[1], x.shape.size());
    int64_t n = x.shape[d];
    if (a[0] == kSelect) {
      HostTensor one = index_along(x, d, {a[2] < 0 ? a[2] + n : a[2]});
      Shape s = x.shape;
      s.erase(d);
      return with_shape(one, s);
    }
    std::vector<int64_t> idx;
    if (a[0] == kNarrow) {
      idx = range(a[2], a[2] + a[3]);
    } else {
      int64_t start = std::clamp<int64_t>(a[2] < 0 ? a[2] + n : a[2], 0, n);
      int64_t end = std::clamp<int64_t>(a[3] < 0 ? a[3] + n : a[3], 0, n);
      idx = range(start, end, a[4]);
    }
    return index_along(x, d, idx).to_tensor();
  };
  c.grad_inputs = {0};
  c.trials = 8;  // three kinds share the trials
  return c;
}

TESSERA_OP_CASE(expand) {
  OpCase c;
  c.name = "expand";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    Shape s = rng.shape(int(rng.size(1, 4)), 1, 5);
    Tensor x = rng.tensor(rng.broadcastable_to(s), dt);
    return std::vector<Tensor>{x, args_tensor(std::vector<int64_t>(s.begin(), s.end()))};
  };
  c.run = [](const std::vector<Tensor>& in) { return tessera::expand(in[0], shape_of(in[1])); };
  c.reference = [](const std::vector<Tensor>& in) {
    HostTensor x(in[0]);
    HostTensor out(shape_of(in[1]));
    for_each_index(out.shape,
                   [&](const std::vector<int64_t>& i) { out.at(i) = x.broadcast_at(i); });
    return out.to_tensor();
  };
  c.grad_inputs = {0};
  return c;
}

TESSERA_OP_CASE(contiguous) {
  OpCase c;
  c.name = "contiguous";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    Shape s = rng.shape(int(rng.size(1, 4)), 1, 5);
    return std::vector<Tensor>{rng.coin() ? rng.strided_tensor(s, dt) : rng.tensor(s, dt)};
  };
  c.run = [](const std::vector<Tensor>& in) {
    Tensor y = tessera::contiguous(in[0]);
    TESSERA_CHECK(y.is_contiguous(), "contiguous returned strides ", y.strides());
    return y;
  };
  c.reference = [](const std::vector<Tensor>& in) { return HostTensor(in[0]).to_tensor(); };
  c.grad_inputs = {0};
  return c;
}

// Three candidate inputs; args = [dim, how many are concatenated]. Unused ones get no grad.
TESSERA_OP_CASE(cat) {
  OpCase c;
  c.name = "cat";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    int nd = int(rng.size(1, 3));
    Shape s = rng.shape(nd, 1, 4);
    int64_t dim = random_dim(rng, nd);
    std::vector<Tensor> in;
    for (int k = 0; k < 3; ++k) {
      Shape sk = s;
      sk[wrap(dim, nd)] = rng.size(0, 4);  // a zero-length piece now and then
      in.push_back(rng.tensor(sk, dt));
    }
    in.push_back(args_tensor({dim, rng.size(1, 3)}));
    return in;
  };
  c.run = [](const std::vector<Tensor>& in) {
    std::vector<int64_t> a = args_of(in[3]);
    return tessera::cat(std::vector<Tensor>(in.begin(), in.begin() + a[1]), a[0]);
  };
  c.reference = [](const std::vector<Tensor>& in) {
    std::vector<int64_t> a = args_of(in[3]);
    std::vector<HostTensor> xs;
    for (int64_t k = 0; k < a[1]; ++k) xs.emplace_back(in[size_t(k)]);
    return host_cat(xs, wrap(a[0], xs[0].shape.size())).to_tensor();
  };
  c.grad_inputs = {0, 1, 2};
  return c;
}

// args = [by_size, dim, used mask, size or sizes...]. The used pieces, each scaled by its
// index + 1 and concatenated in reverse, so a gradient routed to the wrong piece shows.
TESSERA_OP_CASE(split) {
  OpCase c;
  c.name = "split";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    int nd = int(rng.size(1, 3));
    Shape s = rng.shape(nd, 1, 7);
    int64_t dim = random_dim(rng, nd), n = s[wrap(dim, nd)];
    bool by_size = rng.coin();
    std::vector<int64_t> sizes;
    if (by_size) {
      sizes.push_back(rng.size(1, n));
    } else {
      for (int64_t left = n; left > 0;) {
        // Zero-length pieces now and then, but never more than a few pieces in all.
        int64_t k = std::min(left, rng.size(sizes.size() < 6 ? 0 : 3, 3));
        sizes.push_back(k);
        left -= k;
      }
    }
    int64_t pieces = by_size ? (n + sizes[0] - 1) / sizes[0] : int64_t(sizes.size());
    int64_t mask = rng.size(1, (int64_t(1) << pieces) - 1);  // at least one piece is used
    std::vector<int64_t> a = {by_size, dim, mask};
    a.insert(a.end(), sizes.begin(), sizes.end());
    return std::vector<Tensor>{rng.tensor(s, dt), args_tensor(a)};
  };
  c.run = [](const std::vector<Tensor>& in) {
    std::vector<int64_t> a = args_of(in[1]);
    std::vector<Tensor> pieces =
        a[0] ? tessera::split(in[0], a[3], a[1])
             : tessera::split(in[0], std::vector<int64_t>(a.begin() + 3, a.end()), a[1]);
    std::vector<Tensor> used;
    for (size_t i = pieces.size(); i-- > 0;)
      if ((a[2] >> i) & 1) used.push_back(tessera::mul(pieces[i], double(i + 1)));
    return tessera::cat(used, a[1]);
  };
  c.reference = [](const std::vector<Tensor>& in) {
    std::vector<int64_t> a = args_of(in[1]);
    HostTensor x(in[0]);
    int d = wrap(a[1], x.shape.size());
    int64_t n = x.shape[d];
    std::vector<int64_t> sizes(a.begin() + 3, a.end());
    if (a[0]) {
      int64_t size = sizes[0];
      sizes.clear();
      for (int64_t pos = 0; pos < n; pos += size) sizes.push_back(std::min(size, n - pos));
    }
    std::vector<HostTensor> pieces, used;
    int64_t pos = 0;
    for (int64_t k : sizes) {
      pieces.push_back(index_along(x, d, range(pos, pos + k)));
      pos += k;
    }
    for (size_t i = pieces.size(); i-- > 0;) {
      if (!((a[2] >> i) & 1)) continue;
      for (double& v : pieces[i].v) v *= double(i + 1);
      used.push_back(pieces[i]);
    }
    return host_cat(used, d).to_tensor();
  };
  c.grad_inputs = {0};
  return c;
}

}  // namespace tessera::testing
