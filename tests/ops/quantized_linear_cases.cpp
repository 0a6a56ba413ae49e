// The Q8_0 linear: a harness case against f64 loops over the stored int8 values and scales
// (CPU, simulated device, bf16 activations), and quantization itself: the round-trip bound,
// the block format, zero blocks, refusals.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/harness.h"
#include "tessera/core/cpu/linear_w8a8_paths.h"
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

// The CPU's and the GPU's row quantization, replayed: s = max|x| / 127 in f32, q = x / s in f32
// rounded half to even.
struct RowsRef {
  std::vector<int8_t> q;
  std::vector<float> s;
};

RowsRef rows_reference(const std::vector<double>& x, int64_t M, int64_t K) {
  RowsRef r{std::vector<int8_t>(size_t(M * K)), std::vector<float>(size_t(M))};
  for (int64_t m = 0; m < M; ++m) {
    float amax = 0;
    for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::abs(float(x[size_t(m * K + k)])));
    const float d = amax / 127.0f;
    r.s[size_t(m)] = d;
    for (int64_t k = 0; k < K; ++k)
      r.q[size_t(m * K + k)] =
          d == 0 ? 0
                 : int8_t(std::clamp(std::nearbyint(float(x[size_t(m * K + k)]) / d), -127.0f,
                                     127.0f));
  }
  return r;
}

std::vector<Tensor> rows_inputs(CaseRng& rng, DType dt) {
  const int64_t M = rng.size(1, 9), K = 32 * rng.size(1, 5);
  return {rng.coin() ? rng.tensor(Shape{M, K}, dt) : rng.tensor(Shape{2, M, K}, dt)};
}

// The op's two outputs as one f64 tensor [M, K/4 + 1]: the packed words, then the scale.
Tensor rows_as_one(const Tensor& q, const Tensor& scale) {
  return ops::cat(
      {ops::cast(q, DType::f64), ops::view(ops::cast(scale, DType::f64), Shape{scale.size(0), 1})},
      1);
}

}  // namespace

TESSERA_OP_CASE(quantize_rows_q8) {
  OpCase c;
  c.name = "quantize_rows_q8";
  c.make_inputs = rows_inputs;
  c.run = [](const std::vector<Tensor>& in) {
    const ops::Q8Rows r = ops::quantize_rows_q8(in[0]);
    return rows_as_one(r.q, r.scale);
  };
  c.reference = [](const std::vector<Tensor>& in) {
    const int64_t K = in[0].size(in[0].dim() - 1), M = in[0].numel() / K;
    const RowsRef r = rows_reference(to_vector<double>(in[0]), M, K);
    std::vector<int32_t> words(size_t(M * K / 4));
    std::memcpy(words.data(), r.q.data(), r.q.size());
    return rows_as_one(from_vector<int32_t>(words, Shape{M, K / 4}),
                       from_vector<float>(r.s, Shape{M}));
  };
  // The same f32 operations on every device: the bytes and scales are equal, not close.
  c.rtol = 0;
  c.atol = 0;
  return c;
}

TESSERA_OP_CASE(linear_w8a8) {
  OpCase c;
  c.name = "linear_w8a8";
  c.make_inputs = q8_inputs;
  c.run = [](const std::vector<Tensor>& in) {
    return ops::linear_w8a8(in[0], ops::Q8Weight{in[1], in[2]}, in[3]);
  };
  // f64 sums over the replayed int8 rows and the stored weights.
  c.reference = [](const std::vector<Tensor>& in) {
    const int64_t K = in[0].size(in[0].dim() - 1), M = in[0].numel() / K, N = in[1].size(0);
    const RowsRef r = rows_reference(to_vector<double>(in[0]), M, K);
    const std::vector<int32_t> words = to_vector<int32_t>(in[1]);
    const std::vector<double> scale = to_vector<double>(in[2]);
    std::vector<double> out(size_t(M * N));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double y = 0;
        for (int64_t k = 0; k < K; ++k)
          y += double(r.q[size_t(m * K + k)]) * scale[size_t(n * (K / 32) + k / 32)] *
               stored(words, K, n, k);
        out[size_t(m * N + n)] = double(r.s[size_t(m)]) * y +
                                 (in[3].defined() ? to_vector<double>(in[3])[size_t(n)] : 0.0);
      }
    Shape shape = in[0].shape();
    shape[shape.size() - 1] = N;
    return from_vector<double>(out, shape);
  };
  // The 32-term sums are exact integers; f32 rounds only the <= 5 block FMAs, the 8-lane (or
  // 128-partial) tree and the scale: about 10 roundings of 2^-24 of sums bounded by sum |x w|,
  // ~100 here (160 products of O(1) values), so <= 6e-5 absolute.
  c.rtol = 1e-5;
  c.atol = 1e-4;
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

// The CPU kernel's order, replayed in plain C++: lane j of an output sums float(the int32 dot
// of products 4j..4j+3 of block b) * d_b by FMA over b, the lanes add in the tree ((0+4) +
// (2+6)) + ((1+5) + (3+7)), then fma(s, total, bias). Equal bit for bit, for every row of a batch
// of 1 to 9 rows (the kernel's passes of 4 rows and their leftovers), N = 11 (passes of 4 and 2
// weight rows and their leftovers), 1 and 2 threads: so a row's result depends neither on its
// batch, nor on the thread count, nor on the path (every one the build has: AVX-512 VNNI and
// AVX2 where built, and the portable loop).
TEST(LinearW8A8, FollowsItsSummationOrderBitForBit) {
  Generator gen(7, 0);
  const int64_t K = 160, N = 11, blocks = K / 32;
  const ops::Q8Weight w = ops::quantize_q8(randn(Shape{N, K}, gen));
  const Tensor bias = randn(Shape{N}, gen);
  const std::vector<int32_t> words = to_vector<int32_t>(w.q8);
  const std::vector<float> d = to_vector<float>(w.scale), b = to_vector<float>(bias);
  const int threads = num_threads();
  const cpu::W8A8Path fastest = cpu::w8a8_path();
  for (cpu::W8A8Path path : cpu::w8a8_paths_available())
    for (int64_t M = 1; M <= 9; ++M)
      for (int t : {1, 2}) {
        cpu::set_w8a8_path(path);
        set_num_threads(t);
        const Tensor x = randn(Shape{M, K}, gen);
        const RowsRef r = rows_reference(to_vector<double>(x), M, K);
        const std::vector<float> got = to_vector<float>(ops::linear_w8a8(x, w, bias));
        for (int64_t m = 0; m < M; ++m)
          for (int64_t n = 0; n < N; ++n) {
            float lane[8] = {};
            for (int64_t blk = 0; blk < blocks; ++blk)
              for (int j = 0; j < 8; ++j) {
                int32_t dot = 0;
                for (int64_t k = blk * 32 + 4 * j; k < blk * 32 + 4 * j + 4; ++k)
                  dot += int32_t(r.q[size_t(m * K + k)]) * stored(words, K, n, k);
                lane[j] = std::fma(float(dot), d[size_t(n * blocks + blk)], lane[j]);
              }
            const float total = ((lane[0] + lane[4]) + (lane[2] + lane[6])) +
                                ((lane[1] + lane[5]) + (lane[3] + lane[7]));
            ASSERT_EQ(got[size_t(m * N + n)], std::fma(r.s[size_t(m)], total, b[size_t(n)]))
                << cpu::w8a8_path_name(path) << " M=" << M << " row " << m << " column " << n
                << " threads " << t;
          }
      }
  cpu::set_w8a8_path(fastest);
  set_num_threads(threads);
}

// Against the weight-only product, the activations' rounding is bounded: each x moves by at
// most s/2, so an output moves by at most s/2 * sum_k |d q| (plus f32 round-off). And an
// all-zero row has scale 0 and gives the bias.
TEST(LinearW8A8, StaysWithinHalfAnActivationStepOfWeightOnly) {
  Generator gen(9, 0);
  const int64_t M = 6, K = 128, N = 24;
  const ops::Q8Weight w = ops::quantize_q8(randn(Shape{N, K}, gen));
  Tensor x = randn(Shape{M, K}, gen);
  x = ops::cat({ops::narrow(x, 0, 0, M - 1), zeros(Shape{1, K})}, 0);
  const std::vector<double> a = to_vector<double>(ops::linear_w8a8(x, w)),
                            ref = to_vector<double>(ops::linear_q8(x, w)),
                            deq = to_vector<double>(ops::dequantize_q8(w));
  const std::vector<double> s = to_vector<double>(ops::quantize_rows_q8(x).scale);
  EXPECT_EQ(s[size_t(M - 1)], 0.0);
  double worst = 0;  // the largest error as a fraction of its bound
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double l1 = 0;
      for (int64_t k = 0; k < K; ++k) l1 += std::abs(deq[size_t(n * K + k)]);
      const double bound = s[size_t(m)] / 2 * l1 + 1e-4;  // f32 sums of ~128 O(1) terms
      const double err = std::abs(a[size_t(m * N + n)] - ref[size_t(m * N + n)]);
      EXPECT_LE(err, bound) << "row " << m << " column " << n;
      worst = std::max(worst, err / bound);
    }
  for (int64_t n = 0; n < N; ++n) EXPECT_EQ(a[size_t((M - 1) * N + n)], 0.0);
  EXPECT_GT(worst, 0.0);  // the activations were rounded
}

TEST(LinearW8A8, RefusesWhatItCannotQuantize) {
  EXPECT_THROW(ops::quantize_rows_q8(zeros(Shape{2, 48})), Error);  // K not a multiple of 32
  EXPECT_THROW(ops::quantize_rows_q8(from_vector<int32_t>({1}, Shape{1})), Error);
  const ops::Q8Weight q = ops::quantize_q8(zeros(Shape{3, 64}));
  EXPECT_THROW(ops::linear_w8a8(zeros(Shape{2, 32}), q), Error);                   // K mismatch
  EXPECT_THROW(ops::linear_w8a8(zeros(Shape{2, 64}), q, zeros(Shape{4})), Error);  // bias
}

}  // namespace
}  // namespace tessera::testing
