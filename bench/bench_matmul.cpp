// Matmul throughput: Tessera's front end and CPU GEMM next to a plain Eigen product of the same
// shape, in the same run, with the same Eigen build and thread count. The GFLOP/s ratio
// Tessera / Eigen is the cost of Tessera's layer (validation, layout plan, output allocation);
// the acceptance target is >= 90% at 256x768 . 768x3072.
//
// Shapes: a GPT-2-small MLP projection (256 tokens, 768 -> 3072), a square 1024^3 GEMM, the
// same projection as linear() with a [3072, 768] weight used transposed, as [4, 64, 768]
// activations folded into one GEMM, and a batch of attention-score-sized products.

#include <Eigen/Core>
#include <vector>

#include "bench/counters.h"

namespace tessera::bench {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMap = Eigen::Map<RowMatrix>;

std::vector<float> random_values(int64_t n, uint64_t seed) {
  Generator gen(seed);
  return to_vector<float>(randn({n}, gen));
}

void set_common(benchmark::State& state, int64_t batch, int64_t m, int64_t k, int64_t n) {
  report_flops(state, 2.0 * double(batch) * double(m) * double(n) * double(k));
  state.counters["threads"] = double(num_threads());
}

// ops::matmul, allocating its output each call (from the allocator's cache after the first).
void BM_TesseraMatmul(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Generator gen(1);
  Tensor a = randn({m, k}, gen), b = randn({k, n}, gen);
  if (!warm_up(state, [&] { ops::matmul(a, b); })) return;
  for (auto _ : state) {
    Tensor c = ops::matmul(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  set_common(state, 1, m, k, n);
}

// ops::matmul_out into a preallocated output: the same work as the Eigen line below.
void BM_TesseraMatmulOut(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Generator gen(1);
  Tensor a = randn({m, k}, gen), b = randn({k, n}, gen), c = empty({m, n});
  if (!warm_up(state, [&] { ops::matmul_out(c, a, b); })) return;
  for (auto _ : state) {
    ops::matmul_out(c, a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  set_common(state, 1, m, k, n);
}

// The reference: row-major maps and a noalias() product, nothing else.
void BM_EigenMatmul(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  std::vector<float> av = random_values(m * k, 1), bv = random_values(k * n, 2);
  std::vector<float> cv(size_t(m * n));
  RowMap a(av.data(), m, k), b(bv.data(), k, n), c(cv.data(), m, n);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(cv.data());
  }
  set_common(state, 1, m, k, n);
}

// linear(): x [M, K] times weight [N, K] transposed, plus bias.
void BM_TesseraLinear(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Generator gen(1);
  Tensor x = randn({m, k}, gen), w = randn({n, k}, gen), bias = randn({n}, gen);
  if (!warm_up(state, [&] { ops::matmul(x, w, false, true, bias); })) return;
  for (auto _ : state) {
    Tensor y = ops::matmul(x, w, false, true, bias);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  set_common(state, 1, m, k, n);
}

void BM_EigenLinear(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  std::vector<float> xv = random_values(m * k, 1), wv = random_values(n * k, 2);
  std::vector<float> bv = random_values(n, 3), yv(size_t(m * n));
  RowMap x(xv.data(), m, k), w(wv.data(), n, k), y(yv.data(), m, n);
  Eigen::Map<Eigen::RowVectorXf> bias(bv.data(), n);
  for (auto _ : state) {
    y.rowwise() = bias;
    y.noalias() += x * w.transpose();
    benchmark::DoNotOptimize(yv.data());
  }
  set_common(state, 1, m, k, n);
}

// [B, T, C] activations times a [C, N] weight: folded into one (B*T) x C x N GEMM.
void BM_TesseraFolded(benchmark::State& state) {
  const int64_t b = state.range(0), t = state.range(1), c = state.range(2), n = state.range(3);
  Generator gen(1);
  Tensor x = randn({b, t, c}, gen), w = randn({c, n}, gen);
  if (!warm_up(state, [&] { ops::matmul(x, w); })) return;
  for (auto _ : state) {
    Tensor y = ops::matmul(x, w);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  set_common(state, 1, b * t, c, n);
}

// Many small GEMMs: Tessera splits the batch over threads.
void BM_TesseraBatched(benchmark::State& state) {
  const int64_t batch = state.range(0), m = state.range(1), k = state.range(2), n = state.range(3);
  Generator gen(1);
  Tensor a = randn({batch, m, k}, gen), b = randn({batch, k, n}, gen);
  if (!warm_up(state, [&] { ops::matmul(a, b); })) return;
  for (auto _ : state) {
    Tensor c = ops::matmul(a, b);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  set_common(state, batch, m, k, n);
}

// The same batch as a loop of Eigen products, each threaded by Eigen.
void BM_EigenBatchedLoop(benchmark::State& state) {
  const int64_t batch = state.range(0), m = state.range(1), k = state.range(2), n = state.range(3);
  std::vector<float> av = random_values(batch * m * k, 1), bv = random_values(batch * k * n, 2);
  std::vector<float> cv(size_t(batch * m * n));
  for (auto _ : state) {
    for (int64_t i = 0; i < batch; ++i) {
      RowMap a(av.data() + i * m * k, m, k), b(bv.data() + i * k * n, k, n);
      RowMap c(cv.data() + i * m * n, m, n);
      c.noalias() = a * b;
    }
    benchmark::DoNotOptimize(cv.data());
  }
  set_common(state, batch, m, k, n);
}

void gemm_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "K", "N"})
      ->Args({256, 768, 3072})
      ->Args({1024, 1024, 1024})
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_TesseraMatmul)->Apply(gemm_shapes);
BENCHMARK(BM_TesseraMatmulOut)->Apply(gemm_shapes);
BENCHMARK(BM_EigenMatmul)->Apply(gemm_shapes);
BENCHMARK(BM_TesseraLinear)
    ->ArgNames({"M", "K", "N"})
    ->Args({256, 768, 3072})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EigenLinear)
    ->ArgNames({"M", "K", "N"})
    ->Args({256, 768, 3072})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TesseraFolded)
    ->ArgNames({"B", "T", "C", "N"})
    ->Args({4, 64, 768, 3072})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_TesseraBatched)
    ->ArgNames({"batch", "M", "K", "N"})
    ->Args({48, 256, 64, 256})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EigenBatchedLoop)
    ->ArgNames({"batch", "M", "K", "N"})
    ->Args({48, 256, 64, 256})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace tessera::bench
