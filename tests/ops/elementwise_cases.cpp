// Harness cases for elementwise ops and activations.

#include <cmath>

#include "ops/harness.h"

namespace tessera::testing {
namespace {

// a op b with b broadcast into a's shape (or the other way round).
OpCase binary_case(const std::string& name, Tensor (*fn)(const Tensor&, const Tensor&),
                   double (*ref)(double, double), bool positive_b) {
  OpCase c;
  c.name = name;
  c.make_inputs = [positive_b](CaseRng& rng, DType dt) {
    Shape s = rng.shape(int(rng.size(1, 4)));
    Shape bs = rng.broadcastable_to(s);
    Tensor a = rng.tensor(s, dt);
    Tensor b = positive_b ? rng.uniform(bs, dt, 0.5, 2.0) : rng.tensor(bs, dt);
    if (rng.coin()) std::swap(a, b);  // broadcast on either side
    return std::vector<Tensor>{a, b};
  };
  c.run = [fn](const std::vector<Tensor>& in) { return fn(in[0], in[1]); };
  c.reference = [ref](const std::vector<Tensor>& in) {
    HostTensor a(in[0]), b(in[1]);
    Shape s = broadcast_shapes(a.shape, b.shape, "reference");
    HostTensor out(s);
    for_each_index(s, [&](const std::vector<int64_t>& i) {
      out.at(i) = ref(a.broadcast_at(i), b.broadcast_at(i));
    });
    return out.to_tensor();
  };
  c.grad_inputs = {0, 1};
  return c;
}

OpCase unary_case(const std::string& name, Tensor (*fn)(const Tensor&), double (*ref)(double),
                  double lo, double hi) {
  OpCase c;
  c.name = name;
  c.make_inputs = [lo, hi](CaseRng& rng, DType dt) {
    Shape s = rng.shape(int(rng.size(0, 4)));
    Tensor x = rng.uniform(s, dt, lo, hi);
    if (s.size() > 0 && rng.coin())
      x = ops::transpose(ops::contiguous(ops::transpose(x, 0, -1)), 0, -1);
    return std::vector<Tensor>{x};
  };
  c.run = [fn](const std::vector<Tensor>& in) { return fn(in[0]); };
  c.reference = [ref](const std::vector<Tensor>& in) {
    HostTensor x(in[0]);
    for (double& v : x.v) v = ref(v);
    return x.to_tensor();
  };
  c.grad_inputs = {0};
  return c;
}

double gelu_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

}  // namespace

TESSERA_OP_CASE(add) {
  return binary_case(
      "add", [](const Tensor& a, const Tensor& b) { return a + b; },
      [](double a, double b) { return a + b; }, false);
}
TESSERA_OP_CASE(sub) {
  return binary_case(
      "sub", [](const Tensor& a, const Tensor& b) { return a - b; },
      [](double a, double b) { return a - b; }, false);
}
TESSERA_OP_CASE(mul) {
  return binary_case(
      "mul", [](const Tensor& a, const Tensor& b) { return a * b; },
      [](double a, double b) { return a * b; }, false);
}
TESSERA_OP_CASE(div) {
  // Inputs are swapped at random, so keep both operands away from zero.
  OpCase c = binary_case(
      "div", [](const Tensor& a, const Tensor& b) { return a / b; },
      [](double a, double b) { return a / b; }, true);
  auto make = c.make_inputs;
  c.make_inputs = [make](CaseRng& rng, DType dt) {
    std::vector<Tensor> in = make(rng, dt);
    in[1] = ops::add(ops::mul(ops::tanh(in[1]), 0.5), 1.0);  // in [0.5, 1.5]
    return in;
  };
  return c;
}
TESSERA_OP_CASE(neg) {
  return unary_case(
      "neg", [](const Tensor& x) { return -x; }, [](double x) { return -x; }, -3, 3);
}
TESSERA_OP_CASE(exp) {
  return unary_case(
      "exp", [](const Tensor& x) { return tessera::exp(x); }, [](double x) { return std::exp(x); },
      -3, 3);
}
TESSERA_OP_CASE(log) {
  return unary_case(
      "log", [](const Tensor& x) { return tessera::log(x); }, [](double x) { return std::log(x); },
      0.2, 4);
}
TESSERA_OP_CASE(sqrt) {
  return unary_case(
      "sqrt", [](const Tensor& x) { return tessera::sqrt(x); },
      [](double x) { return std::sqrt(x); }, 0.2, 4);
}
TESSERA_OP_CASE(rsqrt) {
  return unary_case(
      "rsqrt", [](const Tensor& x) { return tessera::rsqrt(x); },
      [](double x) { return 1 / std::sqrt(x); }, 0.2, 4);
}
TESSERA_OP_CASE(tanh) {
  return unary_case(
      "tanh", [](const Tensor& x) { return tessera::tanh(x); },
      [](double x) { return std::tanh(x); }, -3, 3);
}
TESSERA_OP_CASE(pow) {
  return unary_case(
      "pow", [](const Tensor& x) { return tessera::pow(x, 2.5); },
      [](double x) { return std::pow(x, 2.5); }, 0.2, 3);
}
TESSERA_OP_CASE(gelu) {
  return unary_case(
      "gelu", [](const Tensor& x) { return tessera::gelu(x); }, gelu_ref, -4, 4);
}
TESSERA_OP_CASE(silu) {
  return unary_case(
      "silu", [](const Tensor& x) { return tessera::silu(x); },
      [](double x) { return x / (1 + std::exp(-x)); }, -4, 4);
}
TESSERA_OP_CASE(relu) {
  OpCase c = unary_case(
      "relu", [](const Tensor& x) { return tessera::relu(x); },
      [](double x) { return x > 0 ? x : 0.0; }, -3, 3);
  // |x| >= 0.05, so the central difference (step 1e-6) never straddles the kink at 0.
  c.make_inputs = [](CaseRng& rng, DType dt) {
    Shape s = rng.shape(int(rng.size(0, 4)));
    Tensor sign = ops::sub(ops::mul(ops::cast(rng.ids(s, 2), dt), 2.0), 1.0);
    return std::vector<Tensor>{ops::mul(rng.uniform(s, dt, 0.05, 3.0), sign)};
  };
  return c;
}

// silu(gate) * up: one shape (no broadcasting), either operand sometimes a strided view.
TESSERA_OP_CASE(swiglu) {
  OpCase c;
  c.name = "swiglu";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    Shape s = rng.shape(int(rng.size(0, 4)));
    return std::vector<Tensor>{rng.tensor(s, dt, 2.0), rng.tensor(s, dt)};
  };
  c.run = [](const std::vector<Tensor>& in) { return tessera::swiglu(in[0], in[1]); };
  c.reference = [](const std::vector<Tensor>& in) {
    HostTensor g(in[0]), u(in[1]);
    for (size_t i = 0; i < g.v.size(); ++i) g.v[i] = g.v[i] / (1 + std::exp(-g.v[i])) * u.v[i];
    return g.to_tensor();
  };
  c.grad_inputs = {0, 1};
  return c;
}

TESSERA_OP_CASE(where) {
  OpCase c;
  c.name = "where";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    Shape s = rng.shape(int(rng.size(1, 3)));
    Tensor cond = ops::relu(rng.tensor(rng.broadcastable_to(s), DType::f32));  // ~half zero
    return std::vector<Tensor>{cond, rng.tensor(s, dt), rng.tensor(rng.broadcastable_to(s), dt)};
  };
  c.run = [](const std::vector<Tensor>& in) { return tessera::where(in[0], in[1], in[2]); };
  c.reference = [](const std::vector<Tensor>& in) {
    HostTensor cond(in[0]), a(in[1]), b(in[2]);
    Shape s = broadcast_shapes(broadcast_shapes(cond.shape, a.shape, "ref"), b.shape, "ref");
    HostTensor out(s);
    for_each_index(s, [&](const std::vector<int64_t>& i) {
      out.at(i) = cond.broadcast_at(i) != 0 ? a.broadcast_at(i) : b.broadcast_at(i);
    });
    return out.to_tensor();
  };
  c.grad_inputs = {1, 2};
  return c;
}

}  // namespace tessera::testing
