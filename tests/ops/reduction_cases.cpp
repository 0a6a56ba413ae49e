// Harness cases for reductions: sum, mean (random dim subsets, keepdim, negative dims,
// non-contiguous inputs), max (values, gradient to the argmax), softmax, log_softmax and
// squared_norm. Arguments travel as an i64 tensor so each trial draws its own.

#include <algorithm>
#include <cmath>
#include <limits>

#include "ops/harness.h"

namespace tessera::testing {
namespace {

Tensor args_tensor(const std::vector<int64_t>& v) {
  return from_vector<int64_t>(v, Shape{int64_t(v.size())});
}

std::vector<int64_t> args_of(const Tensor& t) {
  return to_vector<int64_t>(t);
}

int wrap(int64_t d, int ndim) {
  return int(d < 0 ? d + ndim : d);
}

// args = [keepdim, dims...]; no dims means all of them.
std::vector<Tensor> reduce_inputs(CaseRng& rng, DType dt) {
  int nd = int(rng.size(0, 4));
  Tensor x = rng.tensor(rng.shape(nd, 1, 6), dt);
  std::vector<int64_t> a = {rng.size(0, 1)};
  for (int d = 0; d < nd; ++d)
    if (rng.coin()) a.push_back(rng.coin() ? d - nd : d);
  std::shuffle(a.begin() + 1, a.end(), rng.engine());
  return {x, args_tensor(a)};
}

// Sums x over the reduced dims into the (keepdim or not) output shape; mean divides by the
// count.
Tensor reduce_reference(const std::vector<Tensor>& in, bool mean) {
  HostTensor x(in[0]);
  std::vector<int64_t> a = args_of(in[1]);
  bool keepdim = a[0] != 0;
  int nd = x.shape.size();
  std::vector<bool> reduced(size_t(nd), a.size() == 1);
  for (size_t i = 1; i < a.size(); ++i) reduced[size_t(wrap(a[i], nd))] = true;
  Shape kept, out_shape;
  int64_t count = 1;
  for (int d = 0; d < nd; ++d) {
    kept.push_back(reduced[size_t(d)] ? 1 : x.shape[d]);
    if (reduced[size_t(d)]) count *= x.shape[d];
    if (!reduced[size_t(d)] || keepdim) out_shape.push_back(kept[d]);
  }
  HostTensor acc(kept);
  for_each_index(x.shape, [&](const std::vector<int64_t>& i) {
    std::vector<int64_t> o = i;
    for (int d = 0; d < nd; ++d)
      if (reduced[size_t(d)]) o[size_t(d)] = 0;
    acc.at(o) += x.at(i);
  });
  if (mean)
    for (double& v : acc.v) v /= double(count);
  HostTensor out(out_shape);
  out.v = acc.v;
  return out.to_tensor();
}

// f32 sums of at most 6^4 = 1296 N(0, 1) terms: each partial sum has magnitude ~sqrt(k), so
// the accumulated rounding is about 2^-24 * sum_k sqrt(k) ~ 2^-24 * n^1.5 ~ 3e-3 in the worst
// (sequential) order and far less in practice; 2e-4 covers the blocked orders the kernels use
// with margin, and 1e-5 relative covers the result's own rounding.
constexpr double kSumAtol = 2e-4;

// Distinct values (spacing at least 4 / numel), so max has no ties and a central difference
// of step 1e-6 never swaps the maximum. Non-contiguous half the time.
Tensor distinct_tensor(CaseRng& rng, const Shape& s, DType dt) {
  int64_t n = s.numel();
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = -2.0 + 4.0 * double(i) / double(n);
  std::shuffle(v.begin(), v.end(), rng.engine());
  int nd = s.size();
  if (nd >= 2 && rng.coin()) {
    Shape t = s;
    std::swap(t[nd - 1], t[nd - 2]);
    return ops::transpose(ops::cast(from_vector<double>(v, t), dt), -1, -2);
  }
  return ops::cast(from_vector<double>(v, s), dt);
}

// Row-wise (log-)softmax along dim, with the maximum subtracted first.
Tensor softmax_reference(const std::vector<Tensor>& in, bool log) {
  HostTensor x(in[0]);
  int nd = x.shape.size();
  int d = nd == 0 ? 0 : wrap(args_of(in[1])[0], nd);
  HostTensor out(x.shape);
  if (nd == 0) {
    out.v[0] = log ? 0.0 : 1.0;
    return out.to_tensor();
  }
  Shape rows = x.shape;
  rows[d] = 1;
  for_each_index(rows, [&](const std::vector<int64_t>& r) {
    std::vector<int64_t> i = r;
    double m = -std::numeric_limits<double>::infinity();
    for (i[size_t(d)] = 0; i[size_t(d)] < x.shape[d]; ++i[size_t(d)]) m = std::max(m, x.at(i));
    double s = 0;
    for (i[size_t(d)] = 0; i[size_t(d)] < x.shape[d]; ++i[size_t(d)]) s += std::exp(x.at(i) - m);
    for (i[size_t(d)] = 0; i[size_t(d)] < x.shape[d]; ++i[size_t(d)])
      out.at(i) = log ? x.at(i) - m - std::log(s) : std::exp(x.at(i) - m) / s;
  });
  return out.to_tensor();
}

OpCase softmax_case(const std::string& name, bool log) {
  OpCase c;
  c.name = name;
  c.make_inputs = [](CaseRng& rng, DType dt) {
    int nd = int(rng.size(0, 3));
    Tensor x = rng.tensor(rng.shape(nd, 1, 7), dt, 3.0);
    int64_t dim = nd == 0 ? 0 : rng.size(-nd, nd - 1);
    return std::vector<Tensor>{x, args_tensor({dim})};
  };
  c.run = [log](const std::vector<Tensor>& in) {
    int64_t dim = args_of(in[1])[0];
    return log ? tessera::log_softmax(in[0], dim) : tessera::softmax(in[0], dim);
  };
  c.reference = [log](const std::vector<Tensor>& in) { return softmax_reference(in, log); };
  // exp and log in f32 are accurate to a few ulp; rows are at most 7 long.
  c.rtol = 1e-5;
  c.atol = 1e-6;
  c.grad_inputs = {0};
  return c;
}

}  // namespace

TESSERA_OP_CASE(sum) {
  OpCase c;
  c.name = "sum";
  c.make_inputs = reduce_inputs;
  c.run = [](const std::vector<Tensor>& in) {
    std::vector<int64_t> a = args_of(in[1]);
    return tessera::sum(in[0], std::vector<int64_t>(a.begin() + 1, a.end()), a[0] != 0);
  };
  c.reference = [](const std::vector<Tensor>& in) { return reduce_reference(in, false); };
  c.atol = kSumAtol;
  c.grad_inputs = {0};
  c.trials = 8;
  return c;
}

TESSERA_OP_CASE(mean) {
  OpCase c;
  c.name = "mean";
  c.make_inputs = reduce_inputs;
  c.run = [](const std::vector<Tensor>& in) {
    std::vector<int64_t> a = args_of(in[1]);
    return tessera::mean(in[0], std::vector<int64_t>(a.begin() + 1, a.end()), a[0] != 0);
  };
  c.reference = [](const std::vector<Tensor>& in) { return reduce_reference(in, true); };
  c.atol = kSumAtol;  // the sum's error, divided by the count at least 1
  c.grad_inputs = {0};
  c.trials = 8;
  return c;
}

TESSERA_OP_CASE(max) {
  OpCase c;
  c.name = "max";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    int nd = int(rng.size(1, 4));
    Tensor x = distinct_tensor(rng, rng.shape(nd, 1, 6), dt);
    return std::vector<Tensor>{x, args_tensor({rng.size(-nd, nd - 1), rng.size(0, 1)})};
  };
  c.run = [](const std::vector<Tensor>& in) {
    std::vector<int64_t> a = args_of(in[1]);
    return tessera::max(in[0], a[0], a[1] != 0).values;
  };
  c.reference = [](const std::vector<Tensor>& in) {
    std::vector<int64_t> a = args_of(in[1]);
    HostTensor x(in[0]);
    int nd = x.shape.size(), d = wrap(a[0], nd);
    Shape kept = x.shape;
    kept[d] = 1;
    HostTensor out(kept, -std::numeric_limits<double>::infinity());
    for_each_index(x.shape, [&](const std::vector<int64_t>& i) {
      std::vector<int64_t> o = i;
      o[size_t(d)] = 0;
      out.at(o) = std::max(out.at(o), x.at(i));
    });
    if (!a[1]) out.shape.erase(d);
    return out.to_tensor();
  };
  c.rtol = 0;  // max selects an element: exact
  c.atol = 0;
  c.grad_inputs = {0};
  return c;
}

TESSERA_OP_CASE(softmax) {
  return softmax_case("softmax", false);
}
TESSERA_OP_CASE(log_softmax) {
  return softmax_case("log_softmax", true);
}

// A list of one to four tensors of different shapes and layouts; not differentiable.
TESSERA_OP_CASE(squared_norm) {
  OpCase c;
  c.name = "squared_norm";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    std::vector<Tensor> xs;
    int64_t n = rng.size(1, 4);
    for (int64_t k = 0; k < n; ++k)
      xs.push_back(rng.tensor(rng.shape(int(rng.size(0, 3)), 0, 9), dt));
    return xs;
  };
  c.run = [](const std::vector<Tensor>& in) { return ops::squared_norm(in); };
  c.reference = [](const std::vector<Tensor>& in) {
    double s = 0;
    for (const Tensor& t : in)
      for (double v : HostTensor(t).v) s += v * v;
    return scalar_tensor(s, DType::f64);
  };
  // Positive terms summed in f32 within blocks: relative error at most n * 2^-24 for the
  // n <= 4 * 729 terms, ~2e-4 in the worst order; blocked sums stay far below.
  c.rtol = 2e-4;
  c.atol = 0;
  return c;
}

}  // namespace tessera::testing
