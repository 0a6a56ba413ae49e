// The LayerNorm / RMSNorm launchers (tessera/cuda/kernels/norm.cu) in the simulator against the
// CPU backend on the same inputs: f32, f64 and bf16, row lengths on and off the vector width,
// aligned (vector path) and misaligned (scalar path) buffers, with and without bias / gw / gb.

#include <gtest/gtest.h>

#include <tuple>
#include <utility>
#include <vector>

#include "tessera/core/backend.h"
#include "tessera/core/ops/elementwise.h"
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

// Tolerances by dtype. f32: the kernel and the CPU sum each row (n <= 333 terms of size O(1))
// in different orders, a difference of at most ~n * 2^-24 relative in mean, variance and the
// two backward dot products; outputs are O(1)-O(10), so 2e-5 absolute + 2e-5 relative covers
// it with margin (observed ~1e-6). f64: the same with 2^-53, so 1e-12. bf16: both compute in
// f32 and round once; the f32 results differ as above, which flips a rounding at most once:
// one bf16 ulp, 2^-8 relative, plus f32-level slack.
struct Tol {
  double atol, rtol;
};
Tol tolerance(DType d) {
  if (d == DType::f64) return {1e-12, 1e-12};
  if (d == DType::bf16) return {1e-4, 1.0 / 128};
  return {2e-5, 2e-5};
}
// gw and gb sum over rows (37 here) on top of the row sums: the f32 bound grows by the row
// count, so they get 10x the per-element tolerance; bf16 stays one rounding.
Tol sum_tolerance(DType d) {
  const Tol t = tolerance(d);
  return d == DType::bf16 ? Tol{1e-3, t.rtol} : Tol{t.atol * 10, t.rtol * 10};
}

DType stat_dtype(DType d) {
  return d == DType::f64 ? DType::f64 : DType::f32;
}

class NormKernels : public ::testing::TestWithParam<std::tuple<DType, int64_t, int64_t, bool>> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  int64_t rows() const { return std::get<1>(GetParam()); }
  int64_t n() const { return std::get<2>(GetParam()); }
  int64_t shift() const { return std::get<3>(GetParam()) ? 1 : 0; }
  Backend& cpu() const { return backend_for(Device::cpu()); }
};

TEST_P(NormKernels, LayerNormForwardAndBackwardMatchTheCpu) {
  const DType d = dtype();
  const int64_t R = rows(), N = n();
  // A large offset in x checks the two-pass variance (no E[x^2] - E[x]^2 cancellation).
  const Tensor x = ops::cast(ops::add(host_randn({R, N}, DType::f32, 1), 3.0), d);
  const Tensor w = host_randn({N}, d, 2), b = host_randn({N}, d, 3), gy = host_randn({R, N}, d, 4);
  const double eps = 1e-5;

  Tensor y_ref = empty({R, N}, d), mean_ref = empty({R}, stat_dtype(d)),
         rstd_ref = empty({R}, stat_dtype(d));
  cpu().layernorm_forward(x, w, b, eps, y_ref, mean_ref, rstd_ref);
  Tensor gx_ref = empty({R, N}, d), gw_ref = empty({N}, d), gb_ref = empty({N}, d);
  cpu().layernorm_backward(x, w, mean_ref, rstd_ref, gy, gx_ref, gw_ref, gb_ref);

  const Tensor dx = device_copy_shifted(x, shift()), dw = device_copy_shifted(w, shift()),
               db = device_copy_shifted(b, shift()), dgy = device_copy_shifted(gy, shift());
  const Tensor dy = device_copy_shifted(empty({R, N}, d), shift());
  const Tensor dmean = device_empty({R}, stat_dtype(d)), drstd = device_empty({R}, stat_dtype(d));
  kernels().layernorm_forward(dx, dw, db, eps, dy, dmean, drstd);
  const Tol t = tolerance(d), s = sum_tolerance(d);
  expect_close(to_host(dy), y_ref, t.atol, t.rtol, "y");
  expect_close(to_host(dmean), mean_ref, t.atol, t.rtol, "mean");
  expect_close(to_host(drstd), rstd_ref, t.atol, t.rtol, "rstd");

  const Tensor dgx = device_copy_shifted(empty({R, N}, d), shift());
  const Tensor dgw = device_empty({N}, d), dgb = device_empty({N}, d);
  // The CPU's statistics, so that only the backward kernel is compared.
  kernels().layernorm_backward(dx, dw, device_copy_shifted(mean_ref, 0),
                               device_copy_shifted(rstd_ref, 0), dgy, dgx, dgw, dgb);
  expect_close(to_host(dgx), gx_ref, t.atol, t.rtol, "gx");
  expect_close(to_host(dgw), gw_ref, s.atol, s.rtol, "gw");
  expect_close(to_host(dgb), gb_ref, s.atol, s.rtol, "gb");
}

TEST_P(NormKernels, RmsNormForwardAndBackwardMatchTheCpu) {
  const DType d = dtype();
  const int64_t R = rows(), N = n();
  const Tensor x = host_randn({R, N}, d, 5), w = host_randn({N}, d, 6),
               gy = host_randn({R, N}, d, 7);
  const double eps = 1e-6;
  Tensor y_ref = empty({R, N}, d), rstd_ref = empty({R}, stat_dtype(d));
  cpu().rmsnorm_forward(x, w, eps, y_ref, rstd_ref);
  Tensor gx_ref = empty({R, N}, d), gw_ref = empty({N}, d);
  cpu().rmsnorm_backward(x, w, rstd_ref, gy, gx_ref, gw_ref);

  const Tensor dx = device_copy_shifted(x, shift()), dw = device_copy_shifted(w, shift()),
               dgy = device_copy_shifted(gy, shift());
  const Tensor dy = device_copy_shifted(empty({R, N}, d), shift());
  const Tensor drstd = device_empty({R}, stat_dtype(d));
  kernels().rmsnorm_forward(dx, dw, eps, dy, drstd);
  const Tol t = tolerance(d), s = sum_tolerance(d);
  expect_close(to_host(dy), y_ref, t.atol, t.rtol, "y");
  expect_close(to_host(drstd), rstd_ref, t.atol, t.rtol, "rstd");

  const Tensor dgx = device_copy_shifted(empty({R, N}, d), shift());
  const Tensor dgw = device_empty({N}, d);
  kernels().rmsnorm_backward(dx, dw, device_copy_shifted(rstd_ref, 0), dgy, dgx, dgw);
  expect_close(to_host(dgx), gx_ref, t.atol, t.rtol, "gx");
  expect_close(to_host(dgw), gw_ref, s.atol, s.rtol, "gw");

  // gw not wanted: gx alone, and the same bits as before.
  const Tensor dgx2 = device_copy_shifted(empty({R, N}, d), shift());
  kernels().rmsnorm_backward(dx, dw, device_copy_shifted(rstd_ref, 0), dgy, dgx2, Tensor());
  expect_close(to_host(dgx2), to_host(dgx), 0.0, 0.0, "gx without gw");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, NormKernels,
    ::testing::Values(std::make_tuple(DType::f32, 37, 64, false),    // vector path
                      std::make_tuple(DType::f32, 37, 64, true),     // misaligned: scalar path
                      std::make_tuple(DType::f32, 5, 333, false),    // ragged row length
                      std::make_tuple(DType::f32, 1, 1, false),      // a single element
                      std::make_tuple(DType::bf16, 37, 200, false),  // 8-wide bf16 vectors
                      std::make_tuple(DType::bf16, 9, 77, true),
                      std::make_tuple(DType::f64, 12, 50, false)));

// gw and gb are sums over rows: chunk partials added in a fixed order, so the bits do not depend
// on which blocks or threads run first (the simulator reverses its schedule and runs blocks on
// one or two host threads here).
TEST(NormKernelsDeterminism, LayerNormBackwardBitsDoNotDependOnTheSchedule) {
  const int64_t R = 100, N = 48;
  const Tensor dx = device_copy_shifted(host_randn({R, N}, DType::f32, 1), 0);
  const Tensor dw = device_copy_shifted(host_randn({N}, DType::f32, 2), 0);
  const Tensor dgy = device_copy_shifted(host_randn({R, N}, DType::f32, 3), 0);
  const Tensor dmean = device_empty({R}, DType::f32), drstd = device_empty({R}, DType::f32);
  kernels().layernorm_forward(dx, dw, Tensor(), 1e-5, device_empty({R, N}, DType::f32), dmean,
                              drstd);
  std::vector<Tensor> results;
  for (const auto& [schedule, threads] :
       {std::pair{sim::Schedule::kForward, 1}, std::pair{sim::Schedule::kReverse, 2}}) {
    const sim::ScopedOptions scoped(testing::options_with(schedule, threads));
    const Tensor gx = device_empty({R, N}, DType::f32), gw = device_empty({N}, DType::f32),
                 gb = device_empty({N}, DType::f32);
    kernels().layernorm_backward(dx, dw, dmean, drstd, dgy, gx, gw, gb);
    results.push_back(ops::cat({ops::reshape(to_host(gx), {R * N}), to_host(gw), to_host(gb)}, 0));
  }
  expect_close(results[1], results[0], 0.0, 0.0, "gx, gw, gb under another schedule");
}

TEST(NormKernelsErrors, IntegerInputIsAClearError) {
  const Tensor x = device_empty({2, 3}, DType::i32);
  const Tensor w = device_empty({3}, DType::i32);
  const Tensor y = device_empty({2, 3}, DType::i32);
  const Tensor r = device_empty({2}, DType::f32);
  testing::expect_error([&] { kernels().rmsnorm_forward(x, w, 1e-5, y, r); },
                        {"rmsnorm", "i32[2, 3]", "must be f32, f64, bf16 or f16"});
}

}  // namespace
}  // namespace tessera::cuda
