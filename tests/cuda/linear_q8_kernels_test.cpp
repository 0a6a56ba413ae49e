// The Q8_0 linear launcher on the device under test against the CPU backend on the same
// buffers: M across the kernel's 8-row passes, K with fewer and more 32-blocks than threads,
// with and without bias, every floating dtype; and the operand checks.

#include <gtest/gtest.h>

#include <algorithm>

#include "tessera/core/ops/quantized_linear.h"
#include "tests/cuda/device_kernels.h"
#include "tests/cuda/kernel_compare.h"
#include "tests/cuda/mirror_tensor.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::cpu_backend;
using testing::device_copy;
using testing::expect_near;
using testing::kernels;
using testing::Mirror;
using testing::mirror;

// Both sum K products of normal x and weights of rms ~1 in the compute type, in different
// orders (the CPU in 32 lanes over the whole row then a tree, the device block by block in a
// 128-thread tree). Relative to a result of O(1): 2e-5 in f32, 1e-12 in f64; bf16 / f16: a
// last-bit difference can flip the final rounding, one ulp (doubled). Absolute, for results
// that cancel: the partial sums reach ~sqrt(K), each of the K additions rounds by up to u of
// that, and independent roundings add like a random walk: sqrt(K) * u * sqrt(K) = K u per
// side, 2 K u for the difference (1.2e-3 at K = 10,240 in f32; the CPU's sum alone rounds
// through the 16-bit types only at the end, so u is the compute type's).
double rtol_for(DType dtype) {
  return testing::rtol_by_dtype(dtype, 2e-5, 1e-12);
}
double atol_for(DType dtype, int64_t K) {
  const double u = dtype == DType::f64 ? 0x1p-53 : 0x1p-24;
  return std::max(rtol_for(dtype), 2.0 * double(K) * u);
}

TEST(LinearQ8Kernels, MatchCpu) {
  struct Case {
    int64_t M, K, N;
    bool bias;
  };
  const Case cases[] = {
      {1, 32, 7, false}, {8, 96, 5, true}, {9, 4096, 3, true}, {20, 10240, 2, false}};
  uint64_t seed = 1;
  for (const Case& c : cases)
    for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      const std::string what =
          str_cat("linear_q8 M=", c.M, " K=", c.K, " N=", c.N, " ", dtype_name(dtype));
      const ops::Q8Weight w = ops::quantize_q8(randn(Shape{c.N, c.K}, default_generator()));
      const Tensor q8 = device_copy(w.q8), scale = device_copy(w.scale);
      Mirror x = mirror(Shape{c.M, c.K}, dtype, seed++);
      Mirror b = mirror(Shape{c.N}, dtype, seed++);
      Mirror out = mirror(Shape{c.M, c.N}, dtype, seed++);
      cpu_backend().linear_q8(x.host, w.q8, w.scale, c.bias ? b.host : Tensor(), out.host);
      kernels().linear_q8(x.dev, q8, scale, c.bias ? b.dev : Tensor(), out.dev);
      expect_near(out, rtol_for(dtype), atol_for(dtype, c.K), what);
    }
}

TEST(LinearQ8Kernels, RejectsBadOperands) {
  const ops::Q8Weight w = ops::quantize_q8(randn(Shape{4, 64}, default_generator()));
  const Tensor q8 = device_copy(w.q8), scale = device_copy(w.scale);
  Mirror x = mirror(Shape{2, 32}, DType::f32, 1);  // K 32 against the weight's 64
  Mirror out = mirror(Shape{2, 4}, DType::f32, 2);
  testing::expect_error([&] { kernels().linear_q8(x.dev, q8, scale, Tensor(), out.dev); },
                        {"cuda linear_q8", "K % 32 == 0"});
}

}  // namespace
}  // namespace tessera::cuda
