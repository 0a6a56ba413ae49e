// Harness case for linear_gelu: gelu(x weight^T + bias) with the GELU in the GEMM's epilogue.
// The forward is checked against plain f64 loops, the gradients (which read the saved
// pre-activation) by gradcheck, and the CUDA mode runs it through Backend::matmul_gelu (the
// SIMT GEMM's epilogue under the simulator).

#include <cmath>

#include "ops/harness.h"

namespace tessera::testing {
namespace {

double gelu_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

}  // namespace

// Inputs: x [..., in], weight [out, in], bias [out], and an i64 flag {use_bias}. The bias is
// always passed so gradcheck's input indices stay fixed; when unused its gradient must be zero.
TESSERA_OP_CASE(linear_gelu) {
  OpCase c;
  c.name = "linear_gelu";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    int64_t in = rng.size(1, 9), out = rng.size(1, 9);
    Shape xs = rng.shape(int(rng.size(1, 3)), 1, 5);
    xs.push_back(in);
    Tensor flags = from_vector<int64_t>({int64_t(rng.coin())}, Shape{1});
    return std::vector<Tensor>{rng.tensor(xs, dt), rng.tensor(Shape{out, in}, dt),
                               rng.tensor(Shape{out}, dt), flags};
  };
  c.run = [](const std::vector<Tensor>& in) {
    const bool use_bias = to_vector<int64_t>(in[3])[0] != 0;
    return tessera::linear_gelu(in[0], in[1], use_bias ? in[2] : Tensor());
  };
  c.reference = [](const std::vector<Tensor>& in) {
    const bool use_bias = to_vector<int64_t>(in[3])[0] != 0;
    HostTensor x(in[0]), w(in[1]), bias(in[2]);
    const int64_t k = x.shape.back(), n = w.shape[0], rows = x.shape.numel() / k;
    Shape ys = x.shape;
    ys[ys.size() - 1] = n;
    HostTensor y(ys);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) {
        double s = use_bias ? bias.v[size_t(j)] : 0.0;
        for (int64_t p = 0; p < k; ++p) s += x.v[size_t(r * k + p)] * w.v[size_t(j * k + p)];
        y.v[size_t(r * n + j)] = gelu_ref(s);
      }
    return y.to_tensor();
  };
  c.grad_inputs = {0, 1, 2};
  // Bias on or off, 1-3 leading dims: more trials than the default 4 so both come up often.
  c.trials = 8;
  // The default f32 tolerances hold: sums of at most 9 products of N(0, 1) values round to
  // well under 1e-5 relative, and GELU's slope is at most 1.13, so it does not amplify them.
  return c;
}

}  // namespace tessera::testing
