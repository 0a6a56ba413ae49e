// The SwiGLU launchers (swiglu, swiglu_backward in tessera/cuda/kernels/launchers.h) on the
// device under test, against the CPU backend on the same buffers and against a plain f64 loop:
// contiguous and odd sizes, a transposed gate and an offset view of up, every floating dtype,
// and the operand checks.

#include <gtest/gtest.h>

#include <cmath>

#include "tests/cuda/device_kernels.h"
#include "tests/cuda/mirror_tensor.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::cpu_backend;
using testing::expect_near;
using testing::kernels;
using testing::Mirror;
using testing::mirror;

// Tolerances against the CPU. f32: the CPU's contiguous path is Eigen's vectorised exp, the
// device's libm expf (the simulator) or __expf-free expf (the GPU); a few ulp apart, through
// the 4-6 products of the backward: 1e-5 relative. f64: ~1 ulp of exp, 1e-12. bf16 / f16:
// those float differences can flip the final rounding, one ulp, 2^-8 / 2^-11 (doubled).
// atol covers results that cancel to ~0 (gate near -1.28, where silu' = 0).
double rtol_for(DType dtype) {
  return dtype == DType::f64    ? 1e-12
         : dtype == DType::bf16 ? 2.0 / 256.0
         : dtype == DType::f16  ? 2.0 / 2048.0
                                : 1e-5;
}
double atol_for(DType dtype) {
  return dtype == DType::f64 ? 1e-14 : 1e-6;
}

struct Layout {
  const char* name;
  Shape shape;
  Strides gate_strides;  // up is contiguous from offset 1
};

const Layout kLayouts[] = {
    {"contiguous odd", Shape{1003}, Strides{1}},
    {"transposed gate", Shape{7, 13}, Strides{1, 7}},
};

TEST(SwigluKernels, ForwardAndBackwardMatchCpu) {
  uint64_t seed = 1;
  for (const Layout& l : kLayouts)
    for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      const std::string what = str_cat("swiglu ", l.name, " ", dtype_name(dtype));
      Mirror gate = mirror(l.shape, l.gate_strides, 0, dtype, seed++, -6.0, 6.0);
      Mirror up = mirror(l.shape, contiguous_strides(l.shape), 1, dtype, seed++);
      Mirror gy = mirror(l.shape, dtype, seed++);
      Mirror out = mirror(l.shape, dtype, seed++);
      cpu_backend().swiglu(gate.host, up.host, out.host);
      kernels().swiglu(gate.dev, up.dev, out.dev);
      expect_near(out, rtol_for(dtype), atol_for(dtype), what);
      Mirror ggate = mirror(l.shape, dtype, seed++), gup = mirror(l.shape, dtype, seed++);
      cpu_backend().swiglu_backward(gate.host, up.host, gy.host, ggate.host, gup.host);
      kernels().swiglu_backward(gate.dev, up.dev, gy.dev, ggate.dev, gup.dev);
      expect_near(ggate, rtol_for(dtype), atol_for(dtype), what + " ggate");
      expect_near(gup, rtol_for(dtype), atol_for(dtype), what + " gup");
    }
}

// The device against the formula itself in f64: out = g u sigmoid(g), ggate = gy u s (1 + g (1
// - s)), gup = gy g s. f32 inputs are exact in f64; each result is a handful of f32 operations
// on values <= 6 * 2 * 1: ~8 roundings of 2^-24 relative plus the exp's few ulp, 2e-6.
TEST(SwigluKernels, MatchesTheF64Formula) {
  const Shape shape{5, 41};
  Mirror gate = mirror(shape, DType::f32, 50, -6.0, 6.0), up = mirror(shape, DType::f32, 51);
  Mirror gy = mirror(shape, DType::f32, 52), out = mirror(shape, DType::f32, 53);
  Mirror ggate = mirror(shape, DType::f32, 54), gup = mirror(shape, DType::f32, 55);
  kernels().swiglu(gate.dev, up.dev, out.dev);
  kernels().swiglu_backward(gate.dev, up.dev, gy.dev, ggate.dev, gup.dev);
  const Tensor o = testing::to_host(out.dev_buf), dg = testing::to_host(ggate.dev_buf),
               du = testing::to_host(gup.dev_buf);
  for (int64_t i = 0; i < shape.numel(); ++i) {
    const double g = gate.host_buf.data<float>()[i], u = up.host_buf.data<float>()[i],
                 y = gy.host_buf.data<float>()[i], s = 1 / (1 + std::exp(-g));
    const double want_o = g * s * u, want_dg = y * u * s * (1 + g * (1 - s)), want_du = y * g * s;
    EXPECT_NEAR(o.data<float>()[i], want_o, 2e-6 * (1 + std::abs(want_o))) << i;
    EXPECT_NEAR(dg.data<float>()[i], want_dg, 2e-6 * (1 + std::abs(want_dg))) << i;
    EXPECT_NEAR(du.data<float>()[i], want_du, 2e-6 * (1 + std::abs(want_du))) << i;
  }
}

TEST(SwigluKernels, RejectsMismatchedOperands) {
  Mirror gate = mirror(Shape{4, 3}, DType::f32, 1), up = mirror(Shape{3, 4}, DType::f32, 2);
  Mirror out = mirror(Shape{4, 3}, DType::f32, 3);
  testing::expect_error([&] { kernels().swiglu(gate.dev, up.dev, out.dev); },
                        {"cuda swiglu", "gate's shape and dtype", "[3, 4]"});
  Mirror ids = mirror(Shape{4, 3}, DType::i32, 4);
  testing::expect_error([&] { kernels().swiglu(ids.dev, ids.dev, ids.dev); },
                        {"cuda swiglu", "floating gate"});
}

}  // namespace
}  // namespace tessera::cuda
