// The rotary-embedding launcher (tessera/cuda/kernels/rope.h) under the simulator, against the
// CPU backend: forward and inverse, long-context position offsets, strided views (a [B, T, H,
// D] slice of a fused qkv buffer), in place, every floating dtype, and the inverse undoing the
// forward.

#include <gtest/gtest.h>

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

// Tolerance: both sides use the same f64 table rounded to the compute type and the same
// products; the GPU build may fuse x1 * c - x2 * s into an FMA (one rounding fewer), at most one
// ulp of |x1 c| + |x2 s| <= 2 * max|x| = 4 here: 2^-24 * 4 < 3e-7 in f32. The simulator is
// exact; bf16 / f16 get one final rounding ulp (2^-8 / 2^-11 relative).
double rtol_for(DType dtype) {
  return dtype == DType::bf16 ? 2.0 / 256.0 : dtype == DType::f16 ? 2.0 / 2048.0 : 0.0;
}
double atol_for(DType dtype) {
  return dtype == DType::f64 ? 1e-14 : 3e-7;
}

TEST(RopeKernels, MatchesCpuForwardAndInverse) {
  const Shape shape{2, 5, 3, 10};
  uint64_t seed = 1;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (bool inverse : {false, true})
      for (int64_t pos_offset : {int64_t(0), int64_t(7), int64_t(100000)}) {
        Mirror x = mirror(shape, dtype, seed++);
        Mirror out = mirror(shape, dtype, seed++);
        cpu_backend().rope(x.host, out.host, pos_offset, 10000.0, inverse);
        kernels().rope(x.dev, out.dev, pos_offset, 10000.0, inverse);
        expect_near(
            out, rtol_for(dtype), atol_for(dtype),
            str_cat("rope ", dtype_name(dtype), inverse ? " inverse" : "", " offset ", pos_offset));
      }
}

// x is the k part of a [B, T, 3, H, D] qkv buffer (strides over b, t, h) and out a transposed
// [B, H, T, D] buffer viewed as [B, T, H, D]; then in place.
TEST(RopeKernels, StridedViewsAndInPlace) {
  const int64_t B = 2, T = 4, H = 3, D = 8;
  const Shape shape{B, T, H, D};
  Mirror x = mirror(shape, Strides{T * 3 * H * D, 3 * H * D, D, 1}, H * D, DType::f32, 10);
  Mirror out = mirror(shape, Strides{H * T * D, D, T * D, 1}, 0, DType::f32, 11);
  cpu_backend().rope(x.host, out.host, 3, 500.0, false);
  kernels().rope(x.dev, out.dev, 3, 500.0, false);
  expect_near(out, 0.0, atol_for(DType::f32), "rope strided");
  cpu_backend().rope(x.host, x.host, 3, 500.0, true);
  kernels().rope(x.dev, x.dev, 3, 500.0, true);
  expect_near(x, 0.0, atol_for(DType::f32), "rope in place");
}

TEST(RopeKernels, InverseUndoesForward) {
  const Shape shape{1, 6, 2, 16};
  Mirror x = mirror(shape, DType::f32, 20);
  Mirror y = mirror(shape, DType::f32, 21);
  kernels().rope(x.dev, y.dev, 11, 10000.0, false);
  kernels().rope(y.dev, y.dev, 11, 10000.0, true);
  const Tensor a = testing::to_host(x.dev_buf), b = testing::to_host(y.dev_buf);
  // A rotation and its inverse with the same rounded cos/sin: c^2 + s^2 = 1 within ~2^-23, and
  // each product/sum rounds: |error| < 4 * 2^-24 * 2 * max|x| ~ 1e-6.
  for (int64_t i = 0; i < a.numel(); ++i)
    EXPECT_NEAR(b.data<float>()[i], a.data<float>()[i], 1e-6) << i;
}

TEST(RopeKernels, RejectsOddHeadDimAndStridedD) {
  Mirror x = mirror(Shape{1, 2, 1, 5}, DType::f32, 1);
  testing::expect_error([&] { kernels().rope(x.dev, x.dev, 0, 10000.0, false); },
                        {"cuda rope", "even D"});
  Mirror xs = mirror(Shape{1, 2, 1, 4}, Strides{16, 8, 8, 2}, 0, DType::f32, 2);
  testing::expect_error([&] { kernels().rope(xs.dev, xs.dev, 0, 10000.0, true); },
                        {"cuda rope (inverse)", "unit stride in D"});
}

}  // namespace
}  // namespace tessera::cuda
