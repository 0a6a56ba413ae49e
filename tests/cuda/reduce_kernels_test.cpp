// The reduction launchers (tessera/cuda/kernels/reduce.h) under the simulator, against the CPU
// backend: each kernel shape (warp per row, block per row, split rows, inner > 1), every dtype,
// max's ties and NaNs, max_backward, and squared_norm's determinism.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/cuda/device_kernels.h"
#include "tests/cuda/mirror_tensor.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::kernels;

using testing::cpu_backend;
using testing::expect_near;
using testing::expect_same_bits;
using testing::Mirror;
using testing::mirror;
using testing::upload;

// [outer, r, inner] shapes reaching each kernel: warp per row (r <= 1024), block per row,
// split rows (r >= 16384 with few rows), the inner > 1 kernel (ragged inner), and r = 1.
const Shape kShapes[] = {Shape{5, 37, 1}, Shape{3, 1500, 1}, Shape{2, 20000, 1},
                         Shape{4, 9, 13}, Shape{1, 50, 70},  Shape{3, 1, 5}};

// Inputs are multiples of 2^-8 in [-2, 2): every partial sum (|s| < 2^16 here) is exact in f32,
// so sums agree bit for bit whatever the summation order. A mean adds one division, rounded
// once on the GPU (f32) and twice on the CPU (f64, then f32): at most one ulp apart.
constexpr double kQuantum = 1.0 / 256.0;

TEST(ReduceKernels, SumMeanMaxMatchCpuForEveryKernelShapeAndDtype) {
  uint64_t seed = 1;
  for (const Shape& shape : kShapes)
    for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64})
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max}) {
        const double lo = is_floating(dtype) ? -2.0 : -100.0, hi = -lo;
        Mirror x = mirror(shape, dtype, seed++, lo, hi, kQuantum);
        Mirror out = mirror(Shape{shape[0], shape[2]}, dtype, seed++);
        Mirror idx = mirror(Shape{shape[0], shape[2]}, DType::i64, seed++);
        const Tensor host_idx = op == ReduceOp::max ? idx.host : Tensor();
        const Tensor dev_idx = op == ReduceOp::max ? idx.dev : Tensor();
        cpu_backend().reduce(op, x.host, out.host, host_idx);
        kernels().reduce(op, x.dev, out.dev, dev_idx);
        const std::string what =
            str_cat(reduce_op_name(op), " ", dtype_name(dtype), " ", shape.to_string());
        if (op == ReduceOp::mean && is_floating(dtype)) {
          const double ulp = dtype == DType::bf16  ? 0x1p-7
                             : dtype == DType::f16 ? 0x1p-10
                                                   : 0x1p-23;
          expect_near(out, ulp, 0.0, what);
        } else {
          expect_same_bits(out, what);
        }
        if (op == ReduceOp::max) expect_same_bits(idx, what + " indices");
      }
}

// Ties keep the first index; a NaN wins at its first position; -inf rows still pick index 0.
TEST(ReduceKernels, MaxTiesAndNans) {
  for (const Shape& shape :
       {Shape{6, 40, 1}, Shape{2, 1500, 1}, Shape{2, 20000, 1}, Shape{3, 33, 4}}) {
    Mirror x = mirror(shape, DType::f32, 7, -3.0, 3.0, 1.0);  // integers in [-3, 3): many ties
    float* h = x.host_buf.data<float>();
    const int64_t r = shape[1], inner = shape[2];
    // Row 0 (all inner columns) gets two NaNs; row 1 becomes all -inf.
    for (int64_t i = 0; i < inner; ++i) {
      h[(r / 2) * inner + i] = std::numeric_limits<float>::quiet_NaN();
      h[(r - 1) * inner + i] = std::numeric_limits<float>::quiet_NaN();
      for (int64_t k = 0; k < r; ++k)
        h[(r + k) * inner + i] = -std::numeric_limits<float>::infinity();
    }
    upload(x);
    Mirror out = mirror(Shape{shape[0], inner}, DType::f32, 8);
    Mirror idx = mirror(Shape{shape[0], inner}, DType::i64, 9);
    cpu_backend().reduce(ReduceOp::max, x.host, out.host, idx.host);
    kernels().reduce(ReduceOp::max, x.dev, out.dev, idx.dev);
    expect_same_bits(out, "max values " + shape.to_string());
    expect_same_bits(idx, "max indices " + shape.to_string());
    EXPECT_EQ(idx.host.data<int64_t>()[0], r / 2);  // the first NaN
  }
}

TEST(ReduceKernels, MaxBackwardWritesEveryElement) {
  for (DType dtype : {DType::f32, DType::bf16, DType::f64}) {
    const Shape shape{3, 11, 6};
    Mirror x = mirror(shape, dtype, 11);
    Mirror out = mirror(Shape{3, 6}, dtype, 12), idx = mirror(Shape{3, 6}, DType::i64, 13);
    cpu_backend().reduce(ReduceOp::max, x.host, out.host, idx.host);
    upload(idx);
    Mirror gy = mirror(Shape{3, 6}, dtype, 14);
    // The CPU writes only the chosen positions of a zeroed gx; the device buffer starts as
    // garbage, so a kernel that skipped the zeros would fail.
    Mirror gx = mirror(shape, dtype, 15);
    std::memset(gx.host_buf.data_ptr(), 0, gx.host_buf.nbytes());
    cpu_backend().max_backward(idx.host, gy.host, gx.host);
    kernels().max_backward(idx.dev, gy.dev, gx.dev);
    expect_same_bits(gx, str_cat("max_backward ", dtype_name(dtype)));
  }
}

TEST(ReduceKernels, SquaredNormOverMixedTensorsIsDeterministic) {
  std::vector<Mirror> xs;
  xs.push_back(mirror(Shape{1000}, DType::f32, 21));
  xs.push_back(mirror(Shape{0}, DType::f32, 22));
  xs.push_back(mirror(Shape{13, 7}, DType::bf16, 23));
  xs.push_back(mirror(Shape{70000}, DType::f32, 24));  // several blocks of partials
  xs.push_back(mirror(Shape{5}, DType::f64, 25));
  // An unaligned f32 tensor (one element into its buffer): the scalar path.
  xs.push_back(mirror(Shape{301}, Strides{1}, 1, DType::f32, 26));
  std::vector<Tensor> host, dev;
  for (const Mirror& m : xs) {
    host.push_back(m.host);
    dev.push_back(m.dev);
  }
  Mirror out = mirror(Shape{}, DType::f32, 27);
  cpu_backend().squared_norm(host, out.host);
  kernels().squared_norm(dev, out.dev);
  // Both accumulate squares in f64 (different order: error ~1e-16 relative) and round once to
  // f32; they can differ by that rounding's last bit when the f64 sums straddle a tie.
  expect_near(out, 0x1p-23, 0.0, "squared_norm");
  const float first = testing::to_host(out.dev).item<float>();
  kernels().squared_norm(dev, out.dev);
  EXPECT_EQ(testing::to_host(out.dev).item<float>(), first) << "run to run";
}

TEST(ReduceKernels, RejectsWhatItCannotDo) {
  Mirror x = mirror(Shape{2, 0, 3}, DType::f32, 1), out = mirror(Shape{2, 3}, DType::f32, 2);
  Mirror idx = mirror(Shape{2, 3}, DType::i64, 3);
  testing::expect_error([&] { kernels().reduce(ReduceOp::max, x.dev, out.dev, idx.dev); },
                        {"cuda max", "empty dim"});
  Mirror xi = mirror(Shape{4}, DType::i32, 4);
  testing::expect_error([&] { kernels().squared_norm({xi.dev}, out.dev); },
                        {"cuda squared_norm", "must be an f32 scalar"});
}

}  // namespace
}  // namespace tessera::cuda
