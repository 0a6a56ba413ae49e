// The copy/cast launcher (tessera/cuda/kernels/copy.h) under the simulator, against the CPU
// backend: every (src, dst) dtype pair, contiguous (the vector memcpy path, with ragged byte
// tails), unaligned, transposed and broadcast sources, strided destinations. Casts round the
// same way on both sides (bf16/f16 to nearest even through float), so every result must be
// BIT-IDENTICAL.

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

TEST(CopyKernels, EveryDtypePairIsBitIdenticalToCpu) {
  uint64_t seed = 1;
  for (DType src_dtype : kAllDTypes)
    for (DType dst_dtype : kAllDTypes) {
      // Values with fraction bits and beyond bf16's precision (so the rounding matters), and
      // within every integer type's range (float -> int truncates toward zero on both sides).
      Mirror src = mirror(Shape{7, 9}, Strides{1, 7}, 0, src_dtype, seed++, -300.0, 300.0);
      Mirror dst = mirror(Shape{7, 9}, dst_dtype, seed++);
      cpu_backend().copy(src.host, dst.host);
      kernels().copy(src.dev, dst.dev);
      expect_same_bits(dst, str_cat("copy ", dtype_name(src_dtype), " -> ", dtype_name(dst_dtype)));
    }
}

TEST(CopyKernels, SameDtypeLayouts) {
  struct Case {
    const char* name;
    Shape shape;
    Strides src_strides;
    int64_t src_offset;
    Strides dst_strides;
    int64_t dst_offset;
  };
  const Case cases[] = {
      {"contiguous", Shape{5, 13}, Strides{13, 1}, 0, Strides{13, 1}, 0},
      {"unaligned source", Shape{5, 13}, Strides{13, 1}, 1, Strides{13, 1}, 0},
      {"unaligned destination", Shape{67}, Strides{1}, 0, Strides{1}, 3},
      {"broadcast source", Shape{4, 6, 5}, Strides{5, 0, 1}, 2, Strides{30, 5, 1}, 0},
      {"strided destination", Shape{6, 5}, Strides{5, 1}, 0, Strides{1, 7}, 1},
      {"permuted", Shape{3, 4, 5}, Strides{1, 15, 3}, 0, Strides{20, 5, 1}, 0},
  };
  uint64_t seed = 100;
  for (const Case& c : cases)
    for (DType dtype : {DType::f32, DType::bf16, DType::f64, DType::i32}) {
      Mirror src = mirror(c.shape, c.src_strides, c.src_offset, dtype, seed++);
      Mirror dst = mirror(c.shape, c.dst_strides, c.dst_offset, dtype, seed++);
      cpu_backend().copy(src.host, dst.host);
      kernels().copy(src.dev, dst.dev);
      expect_same_bits(dst, str_cat(c.name, " ", dtype_name(dtype)));
    }
}

// Byte counts that leave 1..15-byte tails after the 16-byte vectors.
TEST(CopyKernels, VectorPathTails) {
  for (DType dtype : {DType::bf16, DType::f32, DType::i64})
    for (int64_t n : {int64_t(1), int64_t(3), int64_t(9), int64_t(1000)}) {
      Mirror src = mirror(Shape{n}, dtype, uint64_t(n));
      Mirror dst = mirror(Shape{n}, dtype, uint64_t(n) + 1);
      cpu_backend().copy(src.host, dst.host);
      kernels().copy(src.dev, dst.dev);
      expect_same_bits(dst, str_cat("memcpy ", dtype_name(dtype), " n=", n));
    }
}

TEST(CopyKernels, RejectsMismatchedShapes) {
  Mirror a = mirror(Shape{4}, DType::f32, 1), b = mirror(Shape{5}, DType::f32, 2);
  testing::expect_error([&] { kernels().copy(a.dev, b.dev); },
                        {"cuda copy", "shapes differ", "f32[4]", "f32[5]"});
}

}  // namespace
}  // namespace tessera::cuda
