// The dropout launcher (tessera/cuda/kernels/dropout.h) under the simulator: masks and values
// BIT-IDENTICAL to the CPU backend's for the same (seed, offset), every floating dtype, ragged
// sizes and offsets off a Philox block boundary, and in place.

#include <gtest/gtest.h>

#include "tests/cuda/device_kernels.h"
#include "tests/cuda/mirror_tensor.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::kernels;

using testing::cpu_backend;
using testing::expect_same_bits;
using testing::Mirror;
using testing::mirror;

TEST(DropoutKernels, MaskAndValuesAreBitIdenticalToCpu) {
  uint64_t seed = 1;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (double p : {0.0, 0.1, 0.5, 0.9})
      for (uint64_t offset : {uint64_t(0), uint64_t(3), uint64_t(1) << 40})
        for (int64_t n : {int64_t(1), int64_t(6), int64_t(517)}) {
          Mirror x = mirror(Shape{n}, dtype, seed++);
          Mirror out = mirror(Shape{n}, dtype, seed++);
          cpu_backend().dropout(x.host, out.host, p, 42, offset);
          kernels().dropout(x.dev, out.dev, p, 42, offset);
          expect_same_bits(
              out, str_cat("dropout ", dtype_name(dtype), " p=", p, " offset=", offset, " n=", n));
        }
}

TEST(DropoutKernels, InPlaceAndTheKeptFraction) {
  const int64_t n = 4000;
  Mirror x = mirror(Shape{n}, DType::f32, 5, 1.0, 2.0);  // nonzero, so zeros mean dropped
  cpu_backend().dropout(x.host, x.host, 0.25, 8, 100);
  kernels().dropout(x.dev, x.dev, 0.25, 8, 100);
  expect_same_bits(x, "dropout in place");
  const Tensor h = testing::to_host(x.dev_buf);
  int64_t dropped = 0;
  for (int64_t i = 0; i < n; ++i) dropped += h.data<float>()[i] == 0.0f;
  // Binomial(4000, 0.25): mean 1000, sd ~27; 5 sd either side.
  EXPECT_NEAR(double(dropped), 1000.0, 140.0);
}

TEST(DropoutKernels, RejectsIntegerTensors) {
  Mirror xi = mirror(Shape{4}, DType::i64, 1);
  testing::expect_error([&] { kernels().dropout(xi.dev, xi.dev, 0.5, 1, 0); },
                        {"cuda dropout", "floating", "i64"});
}

}  // namespace
}  // namespace tessera::cuda
