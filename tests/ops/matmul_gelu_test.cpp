// The GELU epilogue on the CPU: ops::matmul_gelu and linear_gelu against matmul followed by
// gelu. The fused op runs the same GEMM and the same element-wise GELU (on each finished piece
// of the output instead of in a second pass), so the results and the gradients must be
// bit-identical, not merely close: these tests compare bytes.

#include <gtest/gtest.h>

#include <cstring>

#include "tessera/tessera.h"

namespace tessera {
namespace {

void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_TRUE(got.defined() && want.defined()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const Tensor g = ops::contiguous(got), w = ops::contiguous(want);
  EXPECT_EQ(std::memcmp(g.data_ptr(), w.data_ptr(), g.nbytes()), 0) << what;
}

struct Case {
  Shape a, b;
  bool trans_a, trans_b, bias;
};

// Shapes chosen to reach every path of the CPU GEMM: a linear layer's [B, T, C] x [N, C]^T
// folded into one GEMM cut along N into pieces (with a ragged last piece), a tall product cut
// along M, batched operands, a non-folding batch looped by the front end, a product too small
// to thread, and transposed operands.
const Case kCases[] = {
    {{3, 100, 70}, {520, 70}, false, true, true},  {{3, 100, 70}, {520, 70}, false, true, false},
    {{600, 33}, {33, 50}, false, false, true},     {{4, 29, 37}, {4, 29, 41}, true, false, true},
    {{2, 3, 9, 8}, {3, 10, 8}, false, true, true}, {{5, 7}, {7, 3}, false, false, true},
    {{70, 300}, {77, 70}, true, true, false},
};

std::string describe_case(const Case& c, DType dtype, int threads) {
  return str_cat(dtype_name(dtype), " a ", c.a, " (trans ", c.trans_a, ") b ", c.b, " (trans ",
                 c.trans_b, ") bias ", c.bias, " threads ", threads);
}

TEST(MatmulGelu, FusedIsBitIdenticalToMatmulThenGelu) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    for (const Case& c : kCases) {
      Generator gen(7);
      const Tensor a = randn(c.a, gen, dtype), b = randn(c.b, gen, dtype);
      const int64_t n = c.trans_b ? c.b[c.b.size() - 2] : c.b.back();
      const Tensor bias = c.bias ? randn(Shape{n}, gen, dtype) : Tensor();
      for (int threads : {1, 2}) {
        ScopedNumThreads scoped(threads);
        const std::string what = describe_case(c, dtype, threads);
        const Tensor pre = ops::matmul(a, b, c.trans_a, c.trans_b, bias);
        const ops::MatmulGelu fused = ops::matmul_gelu(a, b, c.trans_a, c.trans_b, bias);
        expect_same_bits(fused.pre, pre, what + ": pre-activation");
        expect_same_bits(fused.out, ops::gelu(pre), what + ": gelu");
      }
    }
  }
}

TEST(MatmulGelu, EmptyInnerDimensionLeavesGeluOfTheBias) {
  Generator gen(3);
  const Tensor a = randn({4, 0}, gen), b = randn({0, 5}, gen), bias = randn({5}, gen);
  const ops::MatmulGelu r = ops::matmul_gelu(a, b, false, false, bias);
  expect_same_bits(r.pre, ops::expand(ops::reshape(bias, {1, 5}), {4, 5}), "pre");
  expect_same_bits(r.out, ops::gelu(r.pre), "out");
}

TEST(MatmulGelu, BadShapesNameTheOp) {
  Generator gen(3);
  const Tensor a = randn({4, 6}, gen), b = randn({5, 7}, gen);
  try {
    ops::matmul_gelu(a, b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("matmul_gelu: inner dimensions differ"), std::string::npos)
        << e.what();
  }
  try {
    linear_gelu(a, b);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear_gelu: x must be [..., 7]"), std::string::npos)
        << e.what();
  }
}

// The backward reads the saved pre-activation through gelu's own backward op, then forms
// linear's gradients with the same GEMMs as matmul's backward: the bits match gelu(linear).
TEST(LinearGelu, GradientsAreBitIdenticalToLinearThenGelu) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    for (const Shape& xs : {Shape{2, 9, 24}, Shape{17, 24}, Shape{1, 300, 24}}) {
      for (bool with_bias : {true, false}) {
        const std::string what = str_cat(dtype_name(dtype), " x ", xs, " bias ", with_bias);
        Generator gen(11);
        const Tensor x0 = randn(xs, gen, dtype), w0 = randn({280, 24}, gen, dtype);
        const Tensor b0 = randn({280}, gen, dtype);
        Shape ys = xs;
        ys[ys.size() - 1] = 280;
        const Tensor gy = randn(ys, gen, dtype);
        auto run = [&](bool fused) {
          const Tensor x = ops::clone(x0), w = ops::clone(w0);
          const Tensor b = with_bias ? ops::clone(b0) : Tensor();
          x.set_requires_grad(true);
          w.set_requires_grad(true);
          if (with_bias) b.set_requires_grad(true);
          const Tensor y = fused ? linear_gelu(x, w, b) : gelu(linear(x, w, b));
          y.backward(gy);
          return std::vector<Tensor>{y, x.grad(), w.grad(), with_bias ? b.grad() : Tensor()};
        };
        const std::vector<Tensor> fused = run(true), plain = run(false);
        const char* names[] = {"y", "grad x", "grad weight", "grad bias"};
        for (int i = 0; i < (with_bias ? 4 : 3); ++i)
          expect_same_bits(fused[i], plain[i], what + ": " + names[i]);
      }
    }
  }
}

}  // namespace
}  // namespace tessera
