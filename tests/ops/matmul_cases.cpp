// Harness cases for matmul and linear: random transpose flags, batch broadcasting (b 2-D under
// a 3-D/4-D a, a 2-D under a batched b, both batched with size-1 dims), an optional bias, and
// operands that arrive contiguous, stored transposed or strided with no unit stride at all.
//
// Sizes stay in [1, 9] for gradcheck's sake (it re-runs the op twice per input element); the
// GEMM path for bigger, blocked shapes is covered in tests/core/matmul_test.cpp.

#include "ops/harness.h"

namespace tessera::testing {
namespace {

Shape concat(const Shape& batch, int64_t r, int64_t c) {
  Shape s = batch;
  s.push_back(r);
  s.push_back(c);
  return s;
}

Shape batch_of(const Shape& s) {
  Shape b;
  for (int i = 0; i + 2 < s.size(); ++i) b.push_back(s[i]);
  return b;
}

// op(a) op(b) (+ bias) with plain loops in f64, broadcasting batch dims.
Tensor matmul_reference(const HostTensor& a, const HostTensor& b, const HostTensor* bias, bool ta,
                        bool tb) {
  const int64_t m = ta ? a.shape.back() : a.shape[a.shape.size() - 2];
  const int64_t k = ta ? a.shape[a.shape.size() - 2] : a.shape.back();
  const int64_t n = tb ? b.shape[b.shape.size() - 2] : b.shape.back();
  Shape batch = broadcast_shapes(batch_of(a.shape), batch_of(b.shape), "reference");
  HostTensor out(concat(batch, m, n));
  const size_t nb = size_t(batch.size());
  for_each_index(out.shape, [&](const std::vector<int64_t>& idx) {
    int64_t i = idx[nb], j = idx[nb + 1];
    std::vector<int64_t> ia(idx.begin(), idx.begin() + long(nb)), ib = ia;
    ia.resize(nb + 2);
    ib.resize(nb + 2);
    double s = bias ? bias->v[size_t(j)] : 0.0;
    for (int64_t p = 0; p < k; ++p) {
      ia[nb] = ta ? p : i;
      ia[nb + 1] = ta ? i : p;
      ib[nb] = tb ? j : p;
      ib[nb + 1] = tb ? p : j;
      s += a.broadcast_at(ia) * b.broadcast_at(ib);
    }
    out.at(idx) = s;
  });
  return out.to_tensor();
}

// A batch shape with 0-2 dims of sizes in [1, 3].
Shape small_batch(CaseRng& rng, int lo_dims) {
  return rng.shape(int(rng.size(lo_dims, 2)), 1, 3);
}

}  // namespace

// Inputs: a, b, bias [N], and i64 flags {trans_a, trans_b, use_bias}. The bias is always
// passed so gradcheck's input indices stay fixed; when unused its gradient must be zero.
TESSERA_OP_CASE(matmul) {
  OpCase c;
  c.name = "matmul";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    bool ta = rng.coin(), tb = rng.coin(), use_bias = rng.coin();
    int64_t m = rng.size(1, 9), k = rng.size(1, 9), n = rng.size(1, 9);
    Shape ba, bb;
    switch (rng.size(0, 3)) {
      case 0:
        break;  // 2-D times 2-D
      case 1:
        ba = small_batch(rng, 1);
        break;  // batched a, shared 2-D b (a linear layer)
      case 2:
        bb = small_batch(rng, 1);
        break;    // 2-D a, batched b
      default: {  // both batched; each may drop leading dims or broadcast size-1 dims
        Shape full = small_batch(rng, 1);
        ba = rng.broadcastable_to(full);
        bb = rng.broadcastable_to(full);
      }
    }
    Tensor a = rng.tensor(ta ? concat(ba, k, m) : concat(ba, m, k), dt);
    Tensor b = rng.tensor(tb ? concat(bb, n, k) : concat(bb, k, n), dt);
    Tensor bias = rng.tensor(Shape{n}, dt);
    Tensor flags = from_vector<int64_t>({int64_t(ta), int64_t(tb), int64_t(use_bias)}, Shape{3});
    return std::vector<Tensor>{a, b, bias, flags};
  };
  c.run = [](const std::vector<Tensor>& in) {
    std::vector<int64_t> f = to_vector<int64_t>(in[3]);
    return tessera::matmul(in[0], in[1], f[0] != 0, f[1] != 0, f[2] != 0 ? in[2] : Tensor());
  };
  c.reference = [](const std::vector<Tensor>& in) {
    std::vector<int64_t> f = to_vector<int64_t>(in[3]);
    HostTensor a(in[0]), b(in[1]), bias(in[2]);
    return matmul_reference(a, b, f[2] != 0 ? &bias : nullptr, f[0] != 0, f[1] != 0);
  };
  c.grad_inputs = {0, 1, 2};
  // 4 batch layouts x 4 flag pairs x bias or not: more trials than the default 4 so most
  // combinations come up (each trial takes a few milliseconds).
  c.trials = 24;
  // The default f32 tolerances hold: sums of at most 9 products of N(0, 1) values round to
  // well under 1e-5 relative.
  return c;
}

// linear(x [..., in], weight [out, in], bias [out]) = x weight^T + bias.
TESSERA_OP_CASE(linear) {
  OpCase c;
  c.name = "linear";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    int64_t in = rng.size(1, 9), out = rng.size(1, 9);
    Shape xs = rng.shape(int(rng.size(1, 3)), 1, 5);
    xs.push_back(in);
    return std::vector<Tensor>{rng.tensor(xs, dt), rng.tensor(Shape{out, in}, dt),
                               rng.tensor(Shape{out}, dt)};
  };
  c.run = [](const std::vector<Tensor>& in) { return tessera::linear(in[0], in[1], in[2]); };
  c.reference = [](const std::vector<Tensor>& in) {
    HostTensor x(in[0]), w(in[1]), bias(in[2]);
    // x flattened to [rows, in] (row-major values are unchanged), then the leading shape back.
    Shape lead = x.shape;
    int64_t in_dim = lead.back();
    lead.erase(lead.size() - 1);
    HostTensor x2(Shape{lead.numel(), in_dim});
    x2.v = x.v;
    Tensor y = matmul_reference(x2, w, &bias, false, true);
    Shape ys = lead;
    ys.push_back(w.shape[0]);
    return ops::reshape(y, ys);
  };
  c.grad_inputs = {0, 1, 2};
  return c;
}

}  // namespace tessera::testing
