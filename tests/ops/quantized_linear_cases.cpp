// The Q8_0 linear: a harness case against f64 loops over the stored int8 values and scales
// (CPU, simulated device, bf16 activations), and quantization itself: the round-trip bound,
// the block format, zero blocks, refusals.

#include <gtest/gtest.h>

#include <cmath>

#include "ops/harness.h"
#include "tessera/core/ops/quantized_linear.h"

namespace tessera::testing {
namespace {

// The stored int8 value k of row n, from the packed words (four per i32, little endian).
int8_t stored(const std::vector<int32_t>& words, int64_t K, int64_t n, int64_t k) {
  const int32_t word = words[size_t((n * K + k) / 4)];
  return int8_t((word >> (8 * ((n * K + k) % 4))) & 0xff);
}

// x [M, K] (sometimes a strided view, and sometimes [2, M, K]), a weight quantized from
// normal values, an optional bias. M up to 17 crosses the GPU kernel's 8-row passes; K up to
// 160 gives the 128-thread block more than one 32-block per thread in none, some and all rows.
std::vector<Tensor> q8_inputs(CaseRng& rng, DType dt) {
  const int64_t M = rng.size(1, 17), K = 32 * rng.size(1, 5), N = rng.size(1, 9);
  const ops::Q8Weight w = ops::quantize_q8(rng.tensor(Shape{N, K}, DType::f32));
  const Tensor x = rng.coin() ? rng.tensor(Shape{M, K}, dt) : rng.tensor(Shape{2, M, K}, dt);
  return {x, w.q8, w.scale, rng.coin() ? rng.tensor(Shape{N}, dt) : Tensor()};
}

Tensor q8_reference(const std::vector<Tensor>& in) {
  HostTensor x(in[0]);
  const std::vector<int32_t> words = to_vector<int32_t>(in[1]);
  const std::vector<double> scale = to_vector<double>(in[2]);
  const int64_t K = x.shape.back(), M = int64_t(x.v.size()) / K, N = in[1].size(0);
  Shape out_shape = in[0].shape();
  out_shape[out_shape.size() - 1] = N;
  HostTensor out(out_shape);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double y = in[3].defined() ? to_vector<double>(in[3])[size_t(n)] : 0.0;
      for (int64_t k = 0; k < K; ++k)
        y += x.v[size_t(m * K + k)] * scale[size_t(n * (K / 32) + k / 32)] * stored(words, K, n, k);
      out.v[size_t(m * N + n)] = y;
    }
  return out.to_tensor();
}

}  // namespace

TESSERA_OP_CASE(linear_q8) {
  OpCase c;
  c.name = "linear_q8";
  c.make_inputs = q8_inputs;
  c.run = [](const std::vector<Tensor>& in) {
    return ops::linear_q8(in[0], ops::Q8Weight{in[1], in[2]}, in[3]);
  };
  c.reference = q8_reference;
  // Sums of up to 160 products of normal x and weights up to ~4 (d·q with |q| <= 127): f32
  // round-off of O(10) results, well under 1e-5 relative with 1e-5 absolute for those near 0.
  c.rtol = 1e-5;
  c.atol = 1e-5;
  return c;
}

namespace {

// Every weight comes back within half its block's step (d / 2), the step is the block's max
// |w| / 127 rounded to f16, and the largest weight of a block is stored as ±127.
TEST(QuantizeQ8, RoundTripWithinHalfAStep) {
  const Tensor w = randn(Shape{5, 96}, default_generator());
  const ops::Q8Weight q = ops::quantize_q8(w);
  EXPECT_EQ(q.q8.shape(), (Shape{5, 24}));
  EXPECT_EQ(q.scale.shape(), (Shape{5, 3}));
  const std::vector<double> v = to_vector<double>(w),
                            back = to_vector<double>(ops::dequantize_q8(q));
  const std::vector<double> d = to_vector<double>(q.scale);
  const std::vector<int32_t> words = to_vector<int32_t>(q.q8);
  for (int64_t b = 0; b < 15; ++b) {
    double amax = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < 32; ++i)
      if (std::abs(v[size_t(b * 32 + i)]) > amax) amax = std::abs(v[size_t((at = b * 32 + i))]);
    EXPECT_NEAR(d[size_t(b)], amax / 127, amax / 127 * 1e-3) << "block " << b;  // f16: 2^-11
    EXPECT_EQ(std::abs(stored(words, 96, at / 96, at % 96)), 127) << "block " << b;
    for (int64_t i = 0; i < 32; ++i)
      EXPECT_LE(std::abs(back[size_t(b * 32 + i)] - v[size_t(b * 32 + i)]),
                d[size_t(b)] / 2 + 1e-7);
  }
}

TEST(QuantizeQ8, StoresTheBlockFormat) {
  // One row: block 0 is 0, 1, ..., 31 (d = 31/127), block 1 all zero (d = 0, q = 0).
  std::vector<float> row(64, 0.0f);
  for (int i = 0; i < 32; ++i) row[size_t(i)] = float(i);
  const ops::Q8Weight q = ops::quantize_q8(from_vector<float>(row, Shape{1, 64}));
  const std::vector<int32_t> words = to_vector<int32_t>(q.q8);
  const double d = to_vector<double>(q.scale)[0];
  EXPECT_EQ(to_vector<double>(q.scale)[1], 0.0);
  for (int64_t k = 0; k < 32; ++k)
    EXPECT_EQ(stored(words, 64, 0, k), int8_t(std::nearbyint(k / d)));
  for (int64_t k = 32; k < 64; ++k) EXPECT_EQ(stored(words, 64, 0, k), 0);
  EXPECT_EQ(stored(words, 64, 0, 31), 127);
}

TEST(QuantizeQ8, RefusesWhatItCannotStore) {
  EXPECT_THROW(ops::quantize_q8(zeros(Shape{2, 48})), Error);  // K not a multiple of 32
  EXPECT_THROW(ops::quantize_q8(zeros(Shape{64})), Error);
  EXPECT_THROW(ops::quantize_q8(full(Shape{1, 32}, 1e7)), Error);  // past an f16 scale
  const ops::Q8Weight q = ops::quantize_q8(zeros(Shape{3, 64}));
  EXPECT_THROW(ops::linear_q8(zeros(Shape{2, 32}), q), Error);                   // K mismatch
  EXPECT_THROW(ops::linear_q8(zeros(Shape{2, 64}), q, zeros(Shape{4})), Error);  // bias
  EXPECT_THROW(ops::linear_q8(zeros(Shape{2, 64}), ops::Q8Weight{q.scale, q.q8}), Error);
}

// A request's tokens must not depend on what it is batched with (serving relies on it): each
// row of a batch of M equals that row alone, bit for bit, across the CPU kernel's full passes
// (8 rows, 4 without AVX-512), its passes over the rows left and its 4-weight-row passes
// (M = 1, 2, 4, 7, 8, 13, 17 and N = 11, a multiple of neither), with 1 and 2 threads.
TEST(LinearQ8, RowsDoNotDependOnTheBatchOrThreads) {
  Generator gen(5, 0);
  const int64_t K = 96, N = 11;
  const ops::Q8Weight w = ops::quantize_q8(randn(Shape{N, K}, gen));
  const Tensor bias = randn(Shape{N}, gen);
  const int threads = num_threads();
  for (int64_t M : {1, 2, 4, 7, 8, 13, 17})
    for (int t : {1, 2}) {
      set_num_threads(t);
      const Tensor x = randn(Shape{M, K}, gen);
      const std::vector<float> batch = to_vector<float>(ops::linear_q8(x, w, bias));
      for (int64_t m = 0; m < M; ++m) {
        const Tensor row = ops::contiguous(ops::narrow(x, 0, m, 1));
        const std::vector<float> alone = to_vector<float>(ops::linear_q8(row, w, bias));
        for (int64_t n = 0; n < N; ++n)
          ASSERT_EQ(batch[size_t(m * N + n)], alone[size_t(n)])
              << "M=" << M << " row " << m << " column " << n << " threads " << t;
      }
    }
  set_num_threads(threads);
}

}  // namespace
}  // namespace tessera::testing
