// The softmax launchers (tessera/cuda/kernels/softmax.h) under the simulator, against the CPU
// backend: warp-per-row and block-per-row kernels, vector and scalar paths, every floating
// dtype, rows with infinities and NaN, and the backward pass.

#include <gtest/gtest.h>

#include <limits>

#include "tests/cuda/device_kernels.h"
#include "tests/cuda/mirror_tensor.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::kernels;

using testing::cpu_backend;
using testing::expect_near;
using testing::Mirror;
using testing::mirror;
using testing::upload;

// [rows, n]: warp per row with a ragged n (scalar path) and with n % 8 == 0 (vector path for
// every dtype), block per row likewise.
const Shape kShapes[] = {Shape{7, 33}, Shape{5, 64}, Shape{3, 1501}, Shape{2, 2048}};

// Tolerance. The row sum of n positive exp terms is taken in a different order (the CPU: Eigen,
// 8-wide sequential; here: per-thread online sums, rescaled when the max grows, then a tree),
// relative error up to about (n / 8 + log2 n + 4) * 2^-24 for n <= 2048: < 2e-5 in f32; exp
// itself differs by a few ulp (libm vs Eigen). f64: the same in 2^-53. bf16 / f16: those float
// differences can flip the final rounding: one ulp, 2^-8 / 2^-11 relative (doubled).
double rtol_for(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return 1e-13;
    case DType::bf16:
      return 2.0 / 256.0;
    case DType::f16:
      return 2.0 / 2048.0;
    default:
      return 3e-5;
  }
}

TEST(SoftmaxKernels, ForwardMatchesCpu) {
  uint64_t seed = 1;
  for (const Shape& shape : kShapes)
    for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16})
      for (bool log : {false, true}) {
        Mirror x = mirror(shape, dtype, seed++, -6.0, 6.0);
        Mirror out = mirror(shape, dtype, seed++);
        cpu_backend().softmax(x.host, out.host, log);
        kernels().softmax(x.dev, out.dev, log);
        // log-softmax values are O(log n) in size and come from a subtraction: absolute error
        // ~ rtol * (|x| + lse) ~ 1e-4 in f32 (or 2^-8 * 16 in bf16).
        const double atol = log ? rtol_for(dtype) * 16.0 : 1e-9;
        expect_near(
            out, rtol_for(dtype), atol,
            str_cat(log ? "log_softmax " : "softmax ", dtype_name(dtype), " ", shape.to_string()));
      }
}

// Rows with +inf, all -inf, a NaN, and a row of one huge value among tiny ones: the CPU's
// non-finite-max convention (shift 0, or NaN) gives NaN/0/inf patterns that must match.
TEST(SoftmaxKernels, NonFiniteRowsFollowTheCpuConvention) {
  for (const Shape& shape : {Shape{4, 40}, Shape{4, 1300}}) {
    Mirror x = mirror(shape, DType::f32, 5, -3.0, 3.0);
    float* h = x.host_buf.data<float>();
    const int64_t n = shape[1];
    const float inf = std::numeric_limits<float>::infinity();
    h[3] = inf;                                                  // row 0: one +inf
    for (int64_t k = 0; k < n; ++k) h[n + k] = -inf;             // row 1: all -inf
    h[2 * n + n - 1] = std::numeric_limits<float>::quiet_NaN();  // row 2: a NaN at the end
    h[3 * n + 7] = 80.0f;  // row 3: exp would overflow unshifted
    upload(x);
    for (bool log : {false, true}) {
      Mirror out = mirror(shape, DType::f32, 6);
      cpu_backend().softmax(x.host, out.host, log);
      kernels().softmax(x.dev, out.dev, log);
      expect_near(out, rtol_for(DType::f32), log ? 1e-4 : 1e-9,
                  str_cat(log ? "log_softmax " : "softmax ", "non-finite ", shape.to_string()));
    }
  }
}

TEST(SoftmaxKernels, BackwardMatchesCpu) {
  uint64_t seed = 100;
  for (const Shape& shape : kShapes)
    for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16})
      for (bool log : {false, true}) {
        Mirror x = mirror(shape, dtype, seed++, -4.0, 4.0);
        Mirror y = mirror(shape, dtype, seed++);
        cpu_backend().softmax(x.host, y.host, log);
        upload(y);
        Mirror gy = mirror(shape, dtype, seed++);
        Mirror gx = mirror(shape, dtype, seed++);
        cpu_backend().softmax_backward(y.host, gy.host, gx.host, log);
        kernels().softmax_backward(y.dev, gy.dev, gx.dev, log);
        // The row dot product is summed in another order: its absolute error is about
        // (n / 8 + log2 n) * 2^-24 * sum |gy * y| (sum |gy| for log) <= 2e-5 * n / 8 * 2 in
        // f32; gx subtracts it, so an absolute tolerance scaled by n applies, 1e-6 * n.
        const double atol = (dtype == DType::f64 ? 1e-14 : 1e-6) * double(shape[1]);
        expect_near(gx, rtol_for(dtype), atol,
                    str_cat(log ? "log_softmax" : "softmax", " backward ", dtype_name(dtype), " ",
                            shape.to_string()));
      }
}

TEST(SoftmaxKernels, RejectsNonContiguousOrIntegerRows) {
  Mirror x = mirror(Shape{4, 6}, Strides{1, 4}, 0, DType::f32, 1);
  Mirror out = mirror(Shape{4, 6}, DType::f32, 2);
  testing::expect_error([&] { kernels().softmax(x.dev, out.dev, false); },
                        {"cuda softmax", "contiguous", "f32[4, 6]"});
  Mirror xi = mirror(Shape{4, 6}, DType::i32, 3);
  testing::expect_error([&] { kernels().softmax(xi.dev, xi.dev, true); },
                        {"cuda log_softmax", "floating", "i32"});
}

}  // namespace
}  // namespace tessera::cuda
