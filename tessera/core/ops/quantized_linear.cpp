// Front end of the Q8_0 linear: quantization on the host, and the checks before the backend's
// kernel runs.

#include "tessera/core/ops/quantized_linear.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "tessera/core/detail/op_scope.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/detail/op_utils.h"
#include "tessera/core/ops/movement.h"

namespace tessera::ops {

using detail::backend;

namespace {
constexpr int64_t kBlock = 32;

void check_q8(const char* op, const Q8Weight& w) {
  TESSERA_CHECK(w.q8.defined() && w.scale.defined() && w.q8.dim() == 2 && w.scale.dim() == 2 &&
                    w.q8.dtype() == DType::i32 && w.scale.dtype() == DType::f16 &&
                    w.scale.size(0) == w.q8.size(0) && w.q8.size(1) % 8 == 0 &&
                    w.scale.size(1) * 8 == w.q8.size(1) && w.q8.is_contiguous() &&
                    w.scale.is_contiguous() && w.q8.device() == w.scale.device(),
                op, ": a Q8_0 weight is contiguous q8 i32 [N, K/4] and scale f16 [N, K/32] on ",
                "one device, got q8 ", w.q8.describe(), " and scale ", w.scale.describe());
}
}  // namespace

Q8Weight quantize_q8(const Tensor& w) {
  const OpScope scope("quantize_q8");
  const char* op = "quantize_q8";
  detail::check_defined(op, w, "w");
  detail::check_floating(op, w, "w");
  detail::check_dim(op, w, 2, "w [N, K]");
  const int64_t N = w.size(0), K = w.size(1);
  TESSERA_CHECK(K % kBlock == 0, op, ": the input dimension K = ", K, " of ", w.describe(),
                " must be a multiple of the block size ", kBlock);
  const std::vector<double> v = to_vector<double>(w);
  std::vector<int32_t> words(size_t(N * K / 4), 0);
  std::vector<Half> scales(size_t(N * K / kBlock));
  for (int64_t b = 0; b < N * K / kBlock; ++b) {
    const double* x = v.data() + b * kBlock;
    double amax = 0;
    for (int64_t i = 0; i < kBlock; ++i) amax = std::max(amax, std::abs(x[i]));
    const Half h(float(amax / 127.0));
    const double d = float(h);
    TESSERA_CHECK(std::isfinite(d), op, ": block ", b % (K / kBlock), " of row ", b / (K / kBlock),
                  " of ", w.describe(), " has max |w| = ", amax,
                  ", past what an f16 scale holds (127 x 65504)");
    scales[size_t(b)] = h;
    auto* bytes = reinterpret_cast<int8_t*>(words.data() + b * kBlock / 4);
    for (int64_t i = 0; i < kBlock; ++i)
      bytes[i] = d == 0 ? 0 : int8_t(std::clamp(std::nearbyint(x[i] / d), -127.0, 127.0));
  }
  Q8Weight q;
  q.q8 = from_vector<int32_t>(words, Shape{N, K / 4}, w.device());
  q.scale = from_vector<Half>(scales, Shape{N, K / kBlock}, w.device());
  return q;
}

Tensor dequantize_q8(const Q8Weight& w, DType dtype) {
  const char* op = "dequantize_q8";
  check_q8(op, w);
  const int64_t N = w.out_features(), K = w.in_features();
  const std::vector<int32_t> words = to_vector<int32_t>(w.q8);
  const std::vector<float> scales = to_vector<float>(w.scale);
  std::vector<float> out(size_t(N * K));
  const auto* bytes = reinterpret_cast<const int8_t*>(words.data());
  for (int64_t i = 0; i < N * K; ++i) out[size_t(i)] = scales[size_t(i / kBlock)] * bytes[i];
  return cast(from_vector<float>(out, Shape{N, K}, w.q8.device()), dtype);
}

namespace {

// The checks linear_q8 and linear_w8a8 share; returns the output, allocated, and x as [M, K].
struct LinearQ8Call {
  Tensor x2, out, out2, bias;
};

LinearQ8Call prepare_linear(const char* op, const Tensor& x, const Q8Weight& w,
                            const Tensor& bias) {
  detail::check_defined(op, x, "x");
  detail::check_floating(op, x, "x");
  check_q8(op, w);
  const int64_t N = w.out_features(), K = w.in_features();
  TESSERA_CHECK(x.dim() >= 1 && x.size(x.dim() - 1) == K, op, ": x ", x.describe(),
                " must end in the weight's input dimension ", K);
  detail::check_same_device(op, {&x, &w.q8});
  if (bias.defined()) {
    detail::check_shape(op, bias, Shape{N}, "bias");
    detail::check_dtype(op, bias, x.dtype(), "bias");
    detail::check_same_device(op, {&x, &bias});
  }
  Shape out_shape = x.shape();
  out_shape[out_shape.size() - 1] = N;
  const int64_t M = x.numel() / std::max<int64_t>(K, 1);
  LinearQ8Call call;
  call.out = empty(out_shape, x.dtype(), x.device());
  if (call.out.numel() == 0) return call;
  call.x2 = view(contiguous(x), Shape{M, K});
  call.out2 = view(call.out, Shape{M, N});
  call.bias = bias.defined() ? contiguous(bias) : Tensor();
  return call;
}

}  // namespace

Tensor linear_q8(const Tensor& x, const Q8Weight& w, const Tensor& bias) {
  const OpScope scope("linear_q8");
  const LinearQ8Call c = prepare_linear("linear_q8", x, w, bias);
  if (c.out2.defined()) backend(x).linear_q8(c.x2, w.q8, w.scale, c.bias, c.out2);
  return c.out;
}

Q8Rows quantize_rows_q8(const Tensor& x) {
  const OpScope scope("quantize_rows_q8");
  const char* op = "quantize_rows_q8";
  detail::check_defined(op, x, "x");
  detail::check_floating(op, x, "x");
  TESSERA_CHECK(x.dim() >= 1 && x.size(x.dim() - 1) % kBlock == 0, op, ": x ", x.describe(),
                " must end in a multiple of ", kBlock);
  const int64_t K = x.size(x.dim() - 1), M = K == 0 ? 0 : x.numel() / K;
  Q8Rows r{empty(Shape{M, K / 4}, DType::i32, x.device()), empty(Shape{M}, DType::f32, x.device())};
  if (M * K > 0) backend(x).quantize_rows_q8(view(contiguous(x), Shape{M, K}), r.q, r.scale);
  return r;
}

Tensor linear_w8a8(const Tensor& x, const Q8Weight& w, const Tensor& bias) {
  const OpScope scope("linear_w8a8");
  const LinearQ8Call c = prepare_linear("linear_w8a8", x, w, bias);
  if (!c.out2.defined()) return c.out;
  const Q8Rows rows = quantize_rows_q8(c.x2);
  backend(x).linear_w8a8(rows.q, rows.scale, w.q8, w.scale, c.bias, c.out2);
  return c.out;
}

}  // namespace tessera::ops
