// The elementwise launchers (tessera/cuda/kernels/elementwise.h) under the simulator, against
// the CPU backend on the same buffers: the vector path (contiguous, aligned, ragged tails), the
// strided path (transposed, unaligned, broadcast), in place, and every dtype.

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
using testing::upload;

constexpr UnaryOp kUnaryOps[] = {UnaryOp::neg,   UnaryOp::exp,       UnaryOp::log,  UnaryOp::sqrt,
                                 UnaryOp::rsqrt, UnaryOp::tanh,      UnaryOp::gelu, UnaryOp::silu,
                                 UnaryOp::relu,  UnaryOp::pow_scalar};
constexpr DType kFloatDTypes[] = {DType::f32, DType::f64, DType::bf16, DType::f16};

// Tolerances. f32: the simulator's math is libm, the CPU's contiguous f32 path is Eigen's
// vectorised exp/log/tanh; they differ by a few ulp (~5e-7 relative), compounded through the
// handful of ops in gelu/silu and their derivatives: 1e-5 relative. f64: ~1 ulp per
// transcendental, 1e-12. bf16 (8-bit mantissa) and f16 (11-bit): those float differences can
// flip the final rounding by one ulp, 2^-8 and 2^-11 relative (doubled for the margin).
// atol covers results that cancel to ~0 (gelu near 0, the tanh derivative near saturation).
double rtol_for(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return 1e-12;
    case DType::bf16:
      return 2.0 / 256.0;
    case DType::f16:
      return 2.0 / 2048.0;
    default:
      return 1e-5;
  }
}
double atol_for(DType dtype) {
  return dtype == DType::f64 ? 1e-14 : 1e-6;
}

// Inputs in the op's domain: log, sqrt, rsqrt, pow need positive x.
bool needs_positive(UnaryOp op) {
  return op == UnaryOp::log || op == UnaryOp::sqrt || op == UnaryOp::rsqrt ||
         op == UnaryOp::pow_scalar;
}

// A layout for each path: contiguous and aligned (vector path, 1003 = not a multiple of any
// vector width), contiguous but one element off 16-byte alignment, and transposed.
struct Layout {
  const char* name;
  Shape shape;
  Strides strides;
  int64_t offset;
};
const Layout kLayouts[] = {
    {"contiguous", Shape{17, 59}, Strides{59, 1}, 0},
    {"unaligned", Shape{17, 59}, Strides{59, 1}, 1},
    {"transposed", Shape{13, 7}, Strides{1, 13}, 0},
};

TEST(ElementwiseKernels, UnaryMatchesCpuForEveryOpDtypeAndLayout) {
  uint64_t seed = 1;
  for (const Layout& l : kLayouts)
    for (DType dtype : kFloatDTypes)
      for (UnaryOp op : kUnaryOps) {
        const double lo = needs_positive(op) ? 0.1 : -3.0;
        Mirror x = mirror(l.shape, l.strides, l.offset, dtype, seed++, lo, 3.0);
        Mirror out = mirror(l.shape, l.strides, l.offset, dtype, seed++);
        const double scalar = 1.7;
        cpu_backend().unary(op, x.host, out.host, scalar);
        kernels().unary(op, x.dev, out.dev, scalar);
        expect_near(out, rtol_for(dtype), atol_for(dtype),
                    str_cat(unary_op_name(op), " ", dtype_name(dtype), " ", l.name));
      }
}

TEST(ElementwiseKernels, UnaryInPlaceAndOnIntegers) {
  Mirror x = mirror(Shape{101}, DType::f32, 7);
  cpu_backend().unary(UnaryOp::gelu, x.host, x.host, 0.0);
  kernels().unary(UnaryOp::gelu, x.dev, x.dev, 0.0);
  expect_near(x, rtol_for(DType::f32), atol_for(DType::f32), "gelu in place");

  for (DType dtype : {DType::i32, DType::i64})
    for (UnaryOp op : {UnaryOp::neg, UnaryOp::relu}) {
      Mirror xi = mirror(Shape{37}, dtype, 8, -50.0, 50.0);
      Mirror oi = mirror(Shape{37}, dtype, 9);
      cpu_backend().unary(op, xi.host, oi.host, 0.0);
      kernels().unary(op, xi.dev, oi.dev, 0.0);
      testing::expect_same_bits(oi, str_cat(unary_op_name(op), " ", dtype_name(dtype)));
    }
  Mirror xi = mirror(Shape{8}, DType::i32, 10);
  testing::expect_error([&] { kernels().unary(UnaryOp::exp, xi.dev, xi.dev, 0.0); },
                        {"cuda exp", "integer tensors support only neg and relu", "i32"});
}

TEST(ElementwiseKernels, UnaryBackwardMatchesCpu) {
  uint64_t seed = 100;
  for (const Layout& l : kLayouts)
    for (DType dtype : kFloatDTypes)
      for (UnaryOp op : kUnaryOps) {
        const double lo = needs_positive(op) ? 0.1 : -3.0;
        Mirror x = mirror(l.shape, l.strides, l.offset, dtype, seed++, lo, 3.0);
        Mirror gy = mirror(l.shape, l.strides, l.offset, dtype, seed++);
        Mirror gx = mirror(l.shape, l.strides, l.offset, dtype, seed++);
        const double scalar = 2.5;
        // y = op(x) computed on the CPU and given to both sides, so only the backward differs.
        Mirror y = mirror(l.shape, l.strides, l.offset, dtype, seed++);
        cpu_backend().unary(op, x.host, y.host, scalar);
        upload(y);
        cpu_backend().unary_backward(op, x.host, y.host, gy.host, gx.host, scalar);
        kernels().unary_backward(op, x.dev, y.dev, gy.dev, gx.dev, scalar);
        expect_near(gx, rtol_for(dtype), atol_for(dtype),
                    str_cat(unary_op_name(op), " backward ", dtype_name(dtype), " ", l.name));
      }
}

TEST(ElementwiseKernels, UnaryBackwardWithoutYAndItsMisuse) {
  Mirror x = mirror(Shape{45}, DType::f32, 1), gy = mirror(Shape{45}, DType::f32, 2);
  Mirror gx = mirror(Shape{45}, DType::f32, 3);
  cpu_backend().unary_backward(UnaryOp::silu, x.host, Tensor(), gy.host, gx.host, 0.0);
  kernels().unary_backward(UnaryOp::silu, x.dev, Tensor(), gy.dev, gx.dev, 0.0);
  expect_near(gx, rtol_for(DType::f32), atol_for(DType::f32), "silu backward without y");
  testing::expect_error(
      [&] { kernels().unary_backward(UnaryOp::exp, x.dev, Tensor(), gy.dev, gx.dev, 0.0); },
      {"cuda exp backward", "needs y"});
}

// Broadcast operands as stride-0 views: a [5, 1 -> 6, 7], b [1 -> 5, 6, 7 -> transposed], and
// a scalar-like b (all strides 0).
TEST(ElementwiseKernels, BinaryBroadcastsEveryOpAndDtype) {
  const Shape shape{5, 6, 7};
  uint64_t seed = 200;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64})
    for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div}) {
      // Divisors away from 0 (integers: 1..9), so the quotient is finite and defined.
      const double lo = is_floating(dtype) ? -3.0 : -9.0;
      Mirror a = mirror(shape, Strides{7, 0, 1}, 0, dtype, seed++, lo, 9.0);
      Mirror b = mirror(shape, Strides{0, 1, 6}, 0, dtype, seed++, 1.0, 9.0);
      Mirror s = mirror(shape, Strides{0, 0, 0}, 3, dtype, seed++, 1.0, 9.0);
      for (int which = 0; which < 2; ++which) {
        const Mirror& rhs = which == 0 ? b : s;
        Mirror out = mirror(shape, dtype, seed++);
        cpu_backend().binary(op, a.host, rhs.host, out.host);
        kernels().binary(op, a.dev, rhs.dev, out.dev);
        // Each element is one correctly rounded IEEE op (or exact integer op) on both sides,
        // followed by the same round-to-nearest-even to the storage type: bit-identical.
        testing::expect_same_bits(
            out, str_cat(binary_op_name(op), " ", dtype_name(dtype), which == 0 ? "" : " scalar"));
      }
    }
}

TEST(ElementwiseKernels, BinaryContiguousVectorPathTailsAndInPlace) {
  for (DType dtype : {DType::f32, DType::bf16, DType::i64})
    for (int64_t n : {int64_t(1), int64_t(7), int64_t(8), int64_t(333)}) {
      Mirror a = mirror(Shape{n}, dtype, uint64_t(n), -9.0, 9.0);
      Mirror b = mirror(Shape{n}, dtype, uint64_t(n) + 50, -9.0, 9.0);
      cpu_backend().binary(BinaryOp::mul, a.host, b.host, a.host);
      kernels().binary(BinaryOp::mul, a.dev, b.dev, a.dev);
      testing::expect_same_bits(a, str_cat("mul in place ", dtype_name(dtype), " n=", n));
    }
}

TEST(ElementwiseKernels, WhereWithAnyConditionDtype) {
  const Shape shape{4, 9, 5};
  uint64_t seed = 300;
  for (DType cond_dtype : {DType::f32, DType::bf16, DType::i32, DType::i64})
    for (DType dtype : {DType::f32, DType::f16, DType::i64}) {
      // Values in {-1, 0, 1}: about a third zeros, for the float dtypes too.
      Mirror cond = mirror(shape, Strides{5, 0, 1}, 0, cond_dtype, seed++, -1.0, 2.0, 1.0);
      Mirror a = mirror(shape, Strides{45, 5, 1}, 0, dtype, seed++);
      Mirror b = mirror(shape, Strides{1, 0, 4}, 0, dtype, seed++);
      Mirror out = mirror(shape, Strides{1, 20, 4}, 0, dtype, seed++);
      cpu_backend().where(cond.host, a.host, b.host, out.host);
      kernels().where(cond.dev, a.dev, b.dev, out.dev);
      testing::expect_same_bits(
          out, str_cat("where cond ", dtype_name(cond_dtype), " ", dtype_name(dtype)));
    }
}

}  // namespace
}  // namespace tessera::cuda
