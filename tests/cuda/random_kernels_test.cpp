// The random-tensor launchers (tessera/cuda/kernels/random.h) under the simulator: the values
// must be BIT-IDENTICAL to the CPU backend's for the same (seed, offset), for offsets that do
// and do not start on a Philox block, ragged sizes, and every floating dtype.

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

constexpr uint64_t kOffsets[] = {0, 1, 2, 3, 5, 4096, (uint64_t(1) << 33) + 7};
constexpr int64_t kSizes[] = {1, 2, 3, 4, 9, 1001};

TEST(RandomKernels, UniformIsBitIdenticalToCpu) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (uint64_t offset : kOffsets)
      for (int64_t n : kSizes) {
        Mirror out = mirror(Shape{n}, dtype, 1);
        cpu_backend().random_uniform(out.host, -1.5, 3.0, 1234, offset);
        kernels().random_uniform(out.dev, -1.5, 3.0, 1234, offset);
        expect_same_bits(out, str_cat("rand ", dtype_name(dtype), " n=", n, " offset=", offset));
      }
}

TEST(RandomKernels, NormalIsBitIdenticalToCpu) {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16})
    for (uint64_t offset : kOffsets)
      for (int64_t n : kSizes) {
        Mirror out = mirror(Shape{n}, dtype, 2);
        cpu_backend().random_normal(out.host, 0.5, 2.0, 99, offset);
        kernels().random_normal(out.dev, 0.5, 2.0, 99, offset);
        expect_same_bits(out, str_cat("randn ", dtype_name(dtype), " n=", n, " offset=", offset));
      }
}

// A tensor drawn in two pieces (the second at offset + size of the first) equals one draw.
TEST(RandomKernels, SplittingATensorDoesNotChangeItsValues) {
  Mirror whole = mirror(Shape{30}, DType::f32, 3);
  kernels().random_normal(whole.dev, 0.0, 1.0, 7, 11);
  Mirror part = mirror(Shape{30}, DType::f32, 4);
  kernels().random_normal(testing::view_of(part.dev_buf, Shape{13}, Strides{1}, 0), 0.0, 1.0, 7,
                          11);
  kernels().random_normal(testing::view_of(part.dev_buf, Shape{17}, Strides{1}, 13), 0.0, 1.0, 7,
                          24);
  const Tensor a = testing::to_host(whole.dev_buf), b = testing::to_host(part.dev_buf);
  EXPECT_EQ(std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()), 0);
}

TEST(RandomKernels, RejectsIntegerOrStridedTensors) {
  Mirror xi = mirror(Shape{4}, DType::i32, 1);
  testing::expect_error([&] { kernels().random_uniform(xi.dev, 0, 1, 1, 0); },
                        {"cuda rand", "contiguous floating", "i32"});
  Mirror xs = mirror(Shape{3, 2}, Strides{1, 3}, 0, DType::f32, 2);
  testing::expect_error([&] { kernels().random_normal(xs.dev, 0, 1, 1, 0); },
                        {"cuda randn", "contiguous floating"});
}

}  // namespace
}  // namespace tessera::cuda
