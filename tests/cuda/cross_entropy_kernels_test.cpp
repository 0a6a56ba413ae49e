// The fused cross-entropy launchers (tessera/cuda/kernels/cross_entropy.cu) in the simulator
// against the CPU backend on the same inputs: f32 and bf16 logits, i32 and i64 targets with
// ignored rows, a padded vocabulary (a narrowed view whose row stride exceeds V), vocabularies
// that are and are not multiples of the vector width, and misaligned rows.

#include <gtest/gtest.h>

#include <random>
#include <tuple>
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

constexpr int64_t kIgnore = -100;

// (dtype, target dtype, rows, V, padded V, element shift of the device buffer)
using Case = std::tuple<DType, DType, int64_t, int64_t, int64_t, int64_t>;

class CrossEntropyKernels : public ::testing::TestWithParam<Case> {};

// Targets in [0, V) with every third row ignored.
Tensor make_targets(int64_t rows, int64_t v, DType dtype, uint64_t seed) {
  std::mt19937 rng{uint32_t(seed)};
  std::uniform_int_distribution<int64_t> pick(0, v - 1);
  std::vector<int64_t> t(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) t[size_t(r)] = r % 3 == 1 ? kIgnore : pick(rng);
  return ops::cast(from_vector(t, Shape{rows}), dtype);
}

TEST_P(CrossEntropyKernels, ForwardAndBackwardMatchTheCpu) {
  const auto [d, td, rows, v, vpad, shift] = GetParam();
  const DType sd = d == DType::f64 ? DType::f64 : DType::f32;
  Backend& cpu = backend_for(Device::cpu());
  // Logits with spread 3, so that softmax is far from uniform.
  const Tensor full_logits = host_randn({rows, vpad}, d, 11, 3.0);
  const Tensor logits = ops::narrow(full_logits, 1, 0, v);
  const Tensor targets = make_targets(rows, v, td, 12);

  Tensor loss_ref = empty({}, sd), lse_ref = empty({rows}, sd), valid_ref = empty({}, sd);
  cpu.cross_entropy_forward(logits, targets, kIgnore, loss_ref, lse_ref, valid_ref);
  const Tensor gloss = full({}, 0.75, sd);
  Tensor glogits_ref = empty({rows, v}, d);
  cpu.cross_entropy_backward(logits, targets, lse_ref, gloss, valid_ref, kIgnore, glogits_ref);

  const Tensor dlogits = ops::narrow(device_copy_shifted(full_logits, shift), 1, 0, v);
  const Tensor dtargets = device_copy_shifted(targets, 0);
  const Tensor dloss = device_empty({}, sd), dlse = device_empty({rows}, sd),
               dvalid = device_empty({}, sd);
  kernels().cross_entropy_forward(dlogits, dtargets, kIgnore, dloss, dlse, dvalid);
  // lse: the kernel's online sum and the CPU's two-pass sum add V <= 301 terms in different
  // orders, ~V * 2^-24 relative in the sum, so ~2e-5 absolute after the log; the loss is a mean
  // of such differences. f64: 2^-53 instead.
  const double tol = d == DType::f64 ? 1e-12 : 5e-5;
  expect_close(to_host(dlse), lse_ref, tol, 0.0, "lse");
  expect_close(to_host(dloss), loss_ref, tol, 0.0, "loss");
  expect_close(to_host(dvalid), valid_ref, 0.0, 0.0, "valid (a count: exact)");

  // The backward pass reads the CPU's lse, so only its own arithmetic is compared: the same
  // exp(x - lse) * scale in the same precision, up to exp's last-bit differences (f32: 1e-6
  // relative) and, for bf16, one rounding of the stored gradient (2^-8 relative).
  const Tensor dglogits_full = device_copy_shifted(empty({rows, vpad}, d), shift);
  const Tensor dglogits = ops::narrow(dglogits_full, 1, 0, v);
  kernels().cross_entropy_backward(dlogits, dtargets, device_copy_shifted(lse_ref, 0),
                                   device_copy_shifted(gloss, 0), device_copy_shifted(valid_ref, 0),
                                   kIgnore, dglogits);
  const double rtol = d == DType::bf16 ? 1.0 / 128 : (d == DType::f64 ? 1e-12 : 1e-5);
  expect_close(ops::narrow(to_host(dglogits_full), 1, 0, v), glogits_ref, 1e-9, rtol, "glogits");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CrossEntropyKernels,
    ::testing::Values(Case{DType::f32, DType::i64, 13, 100, 100, 0},  // whole vectors
                      Case{DType::f32, DType::i32, 13, 37, 40, 0},    // padded: vectors + tail
                      Case{DType::f32, DType::i64, 6, 50, 50, 1},     // misaligned: scalar
                      Case{DType::bf16, DType::i64, 7, 77, 80, 0},    // 8-wide bf16 + tail
                      Case{DType::f64, DType::i32, 5, 301, 301, 0},
                      Case{DType::f32, DType::i64, 1, 1, 1, 0}));  // one class

TEST(CrossEntropyKernelsEdge, AllRowsIgnoredGiveZeroLossAndGradient) {
  const int64_t rows = 4, v = 9;
  const Tensor dlogits = device_copy_shifted(host_randn({rows, v}, DType::f32, 3), 0);
  const Tensor dtargets = device_copy_shifted(full({rows}, double(kIgnore), DType::i64), 0);
  const Tensor dloss = device_empty({}, DType::f32), dlse = device_empty({rows}, DType::f32),
               dvalid = device_empty({}, DType::f32);
  kernels().cross_entropy_forward(dlogits, dtargets, kIgnore, dloss, dlse, dvalid);
  EXPECT_EQ(to_host(dloss).item<float>(), 0.0f);
  EXPECT_EQ(to_host(dvalid).item<float>(), 0.0f);
  const Tensor dg = device_empty({rows, v}, DType::f32);
  kernels().cross_entropy_backward(dlogits, dtargets, dlse, device_copy_shifted(full({}, 1.0), 0),
                                   dvalid, kIgnore, dg);
  expect_close(to_host(dg), zeros({rows, v}), 0.0, 0.0, "glogits of ignored rows");
}

TEST(CrossEntropyKernelsEdge, InfiniteLogitsFollowTheCpu) {
  // A row with a -inf entry (masked class), and a row with +inf: lse stays finite / is +inf.
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor logits = from_vector<float>({1.f, -inf, 2.f, 0.5f, inf, -1.f}, Shape{2, 3});
  const Tensor targets = from_vector<int64_t>({0, 2}, Shape{2});
  Tensor loss = empty({}), lse = empty({2}), valid = empty({});
  backend_for(Device::cpu()).cross_entropy_forward(logits, targets, kIgnore, loss, lse, valid);
  const Tensor dlse = device_empty({2}, DType::f32);
  const Tensor dloss = device_empty({}, DType::f32), dvalid = device_empty({}, DType::f32);
  kernels().cross_entropy_forward(device_copy_shifted(logits, 0), device_copy_shifted(targets, 0),
                                  kIgnore, dloss, dlse, dvalid);
  // Two finite terms in row 0: both sides compute log(1 + e^-1) + 2 to within f32 rounding.
  expect_close(to_host(dlse), lse, 1e-6, 0.0, "lse");
}

TEST(CrossEntropyKernelsEdge, FloatTargetsAreAClearError) {
  const Tensor x = device_empty({2, 3}, DType::f32);
  const Tensor t = device_empty({2}, DType::f32);
  testing::expect_error(
      [&] {
        kernels().cross_entropy_forward(x, t, kIgnore, device_empty({}, DType::f32),
                                        device_empty({2}, DType::f32),
                                        device_empty({}, DType::f32));
      },
      {"cross_entropy", "f32[2]", "must be i32 or i64"});
}

}  // namespace
}  // namespace tessera::cuda
