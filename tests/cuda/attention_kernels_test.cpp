// The flash-attention launchers (tessera/cuda/kernels/attention.cu) in the simulator against
// the CPU backend on the same inputs: output, lse and all three gradients, for sequence lengths
// around the 32-row SIMT tile and the 64-row tensor-core tile (1, 5, 17, 67), head dims 16, 24
// and 64 (padded lanes), grouped-query heads, Tq < Tk (queries at the end of the keys),
// non-contiguous [B, T, H, D] views; f32 and f64 (SIMT kernels) and bf16 / f16 (tensor-core
// forward, SIMT backward).

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "tessera/core/backend.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tests/cuda/device_kernels.h"
#include "tests/cuda/kernel_compare.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::kernels;

using testing::device_copy_shifted;
using testing::device_empty;
using testing::expect_close;
using testing::host_randn;
using testing::to_host;

struct AttnCase {
  DType dtype;
  int64_t B, H, Hkv, Tq, Tk, D;
  bool transposed;  // tensors are [B, T, H, D] memory viewed as [B, H, T, D]
};

// A device tensor of logical shape [B, H, T, D] holding `host`; transposed: stored as
// [B, T, H, D] and viewed through a permutation (strides (T*H*D, D, H*D, 1)).
Tensor to_device(const Tensor& host, bool transposed) {
  if (!transposed) return device_copy_shifted(host, 0);
  const Tensor stored = device_copy_shifted(ops::transpose(host, 1, 2), 0);
  return ops::transpose(stored, 1, 2);
}
Tensor device_like(const Shape& shape, DType d, bool transposed) {
  return to_device(empty(shape, d), transposed);
}

double max_abs(const Tensor& t) {
  double m = 0.0;
  for (double x : to_vector<double>(t)) m = std::max(m, std::fabs(x));
  return m;
}

class AttentionKernels : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionKernels, ForwardAndBackwardMatchTheCpu) {
  const AttnCase c = GetParam();
  const DType d = c.dtype;
  const DType sd = d == DType::f64 ? DType::f64 : DType::f32;
  Backend& cpu = backend_for(Device::cpu());
  const Shape qs{c.B, c.H, c.Tq, c.D}, ks{c.B, c.Hkv, c.Tk, c.D};
  const Tensor q = host_randn(qs, d, 1), k = host_randn(ks, d, 2), v = host_randn(ks, d, 3),
               go = host_randn(qs, d, 4);
  const double scale = 1.0 / std::sqrt(double(c.D));

  Tensor out_ref = empty(qs, d), lse_ref = empty({c.B, c.H, c.Tq}, sd);
  cpu.attention_forward(q, k, v, scale, out_ref, lse_ref);
  Tensor gq_ref = empty(qs, d), gk_ref = empty(ks, d), gv_ref = empty(ks, d);
  cpu.attention_backward(q, k, v, out_ref, lse_ref, go, scale, gq_ref, gk_ref, gv_ref);

  const Tensor dq = to_device(q, c.transposed), dk = to_device(k, c.transposed),
               dv = to_device(v, c.transposed), dgo = to_device(go, c.transposed);
  const Tensor dout = device_like(qs, d, c.transposed);
  const Tensor dlse = device_empty({c.B, c.H, c.Tq}, sd);
  kernels().attention_forward(dq, dk, dv, scale, dout, dlse);

  // Tolerances. f32: scores are D-term dot products of N(0,1) values (|s| up to ~4 after
  // scaling) and outputs are convex combinations of v (|o| <= ~3); the kernel and the CPU sum
  // D-term dots and Tk-term softmax sums in different orders, ~(D + Tk) * 2^-24 ~ 1e-5 relative;
  // the gradients add one more such sum (over queries for dK/dV, keys for dQ), and their size
  // grows with T, so 5e-5 absolute + 5e-5 relative. f64: the same bound with 2^-53. bf16: inputs
  // are exact in f32 on both sides and only the stored outputs round, so one bf16 rounding
  // (2^-8 relative) plus the f32 slack.
  const bool half = d == DType::bf16 || d == DType::f16;
  // One ulp, relative (2^-7 bf16, 2^-10 f16): where the f32 results on the two sides straddle a
  // rounding boundary, the stored 16-bit values differ by one ulp.
  const double unit = d == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;
  const double atol = d == DType::f64 ? 1e-12 : 5e-5;
  const double rtol = half ? unit : (d == DType::f64 ? 1e-12 : 5e-5);
  expect_close(to_host(dlse), lse_ref, atol, rtol, "lse");
  // 16-bit inputs take the tensor-core kernel, which rounds P to the input type before P V
  // (relative error unit / 2 per weight), so out may differ by up to unit / 2 * max|v| on top of
  // its own rounding; lse comes from the unrounded P and keeps the tolerance above.
  const double out_atol = half ? unit / 2 * max_abs(v) + atol : atol;
  expect_close(to_host(dout), out_ref, out_atol, rtol, "out");

  // The backward pass runs on the CPU's out and lse, so it is compared on its own.
  const Tensor dgq = device_like(qs, d, c.transposed);
  const Tensor dgk = device_like(ks, d, c.transposed), dgv = device_like(ks, d, c.transposed);
  kernels().attention_backward(dq, dk, dv, to_device(out_ref, c.transposed),
                               device_copy_shifted(lse_ref, 0), dgo, scale, dgq, dgk, dgv);
  expect_close(to_host(dgq), gq_ref, atol, rtol, "gq");
  expect_close(to_host(dgk), gk_ref, atol, rtol, "gk");
  expect_close(to_host(dgv), gv_ref, atol, rtol, "gv");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionKernels,
    ::testing::Values(AttnCase{DType::f32, 1, 2, 2, 1, 1, 16, false},    // one token
                      AttnCase{DType::f32, 1, 3, 3, 5, 5, 24, false},    // padded head dim
                      AttnCase{DType::f32, 2, 1, 1, 17, 17, 64, false},  // B = 2
                      AttnCase{DType::f32, 1, 2, 1, 67, 67, 64, false},  // 3 tiles, GQA 2:1
                      AttnCase{DType::f32, 1, 3, 1, 17, 40, 16, true},   // Tq < Tk, strided
                      AttnCase{DType::bf16, 1, 2, 2, 17, 17, 64, false},
                      AttnCase{DType::f16, 2, 2, 1, 67, 70, 24, true},  // 2 tiles of 64
                      AttnCase{DType::f64, 1, 2, 1, 33, 33, 24, false}));

// Every gradient row has one owner that adds its terms in a fixed order (over the heads of a GQA
// group, then queries), so the bits do not depend on the block schedule or host threads.
TEST(AttentionKernelsDeterminism, BackwardBitsDoNotDependOnTheSchedule) {
  const Shape qs{1, 4, 40, 16}, ks{1, 2, 40, 16};
  const Tensor q = device_copy_shifted(host_randn(qs, DType::f32, 1), 0);
  const Tensor k = device_copy_shifted(host_randn(ks, DType::f32, 2), 0);
  const Tensor v = device_copy_shifted(host_randn(ks, DType::f32, 3), 0);
  const Tensor go = device_copy_shifted(host_randn(qs, DType::f32, 4), 0);
  const Tensor out = device_empty(qs, DType::f32), lse = device_empty({1, 4, 40}, DType::f32);
  kernels().attention_forward(q, k, v, 0.25, out, lse);
  std::vector<Tensor> results;
  for (const auto& [schedule, threads] :
       {std::pair{sim::Schedule::kForward, 1}, std::pair{sim::Schedule::kReverse, 2}}) {
    const sim::ScopedOptions scoped(testing::options_with(schedule, threads));
    const Tensor gq = device_empty(qs, DType::f32), gk = device_empty(ks, DType::f32),
                 gv = device_empty(ks, DType::f32);
    kernels().attention_backward(q, k, v, out, lse, go, 0.25, gq, gk, gv);
    results.push_back(
        ops::cat({ops::reshape(to_host(gq), {qs.numel()}), ops::reshape(to_host(gk), {ks.numel()}),
                  ops::reshape(to_host(gv), {ks.numel()})},
                 0));
  }
  expect_close(results[1], results[0], 0.0, 0.0, "gq, gk, gv under another schedule");
}

TEST(AttentionKernelsErrors, HeadDimOver128IsAClearError) {
  const Tensor q = device_empty({1, 1, 2, 130}, DType::f32);
  const Tensor lse = device_empty({1, 1, 2}, DType::f32);
  testing::expect_error([&] { kernels().attention_forward(q, q, q, 1.0, q, lse); },
                        {"attention", "head dim 130", "maximum of 128"});
}

}  // namespace
}  // namespace tessera::cuda
