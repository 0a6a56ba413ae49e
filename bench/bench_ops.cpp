// Throughput of the fused transformer kernels through the op front end (no autograd tape):
// layernorm, softmax and cross-entropy are memory-bound and report GB/s against the bytes they
// must move; attention is compute-bound and reports GFLOP/s of its causal matmul work.
//
// Byte counts assume each input is read once and each output written once (f32); the
// roofline is the machine's memory bandwidth, so GB/s reads directly as a fraction of it.

#include <Eigen/Core>
#include <cstring>
#include <vector>

#include "bench/counters.h"
#include "tessera/core/cpu/parallel.h"

namespace tessera::bench {
namespace {

constexpr double kF32 = 4.0;

// LayerNorm over [rows, C]: forward reads x, writes y (mean and rstd are per row, negligible).
void BM_LayerNormForward(benchmark::State& state) {
  const int64_t rows = state.range(0), c = state.range(1);
  Generator gen(1);
  Tensor x = randn({rows, c}, gen), w = randn({c}, gen), b = randn({c}, gen);
  if (!warm_up(state, [&] { ops::layernorm_forward(x, w, b); })) return;
  for (auto _ : state) {
    ops::LayerNormOutput out = ops::layernorm_forward(x, w, b);
    benchmark::DoNotOptimize(out.y.data_ptr());
  }
  report_bytes(state, 2.0 * kF32 * double(rows * c));
}

// Backward reads x and gy, writes gx (weight and bias gradients are [C]).
void BM_LayerNormBackward(benchmark::State& state) {
  const int64_t rows = state.range(0), c = state.range(1);
  Generator gen(1);
  Tensor x = randn({rows, c}, gen), w = randn({c}, gen), b = randn({c}, gen);
  Tensor gy = randn({rows, c}, gen);
  ops::LayerNormOutput fwd;
  if (!warm_up(state, [&] {
        fwd = ops::layernorm_forward(x, w, b);
        ops::layernorm_backward(x, w, fwd.mean, fwd.rstd, gy, true, true);
      }))
    return;
  for (auto _ : state) {
    ops::NormGrads g = ops::layernorm_backward(x, w, fwd.mean, fwd.rstd, gy, true, true);
    benchmark::DoNotOptimize(g.gx.data_ptr());
  }
  report_bytes(state, 3.0 * kF32 * double(rows * c));
}

// Row softmax over [rows, n]: reads x, writes y.
void BM_Softmax(benchmark::State& state) {
  const int64_t rows = state.range(0), n = state.range(1);
  Generator gen(1);
  Tensor x = randn({rows, n}, gen);
  if (!warm_up(state, [&] { ops::softmax(x, -1); })) return;
  for (auto _ : state) {
    Tensor y = ops::softmax(x, -1);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  report_bytes(state, 2.0 * kF32 * double(rows * n));
}

// Causal attention FLOPs: QK^T and PV are 2 * T^2 * D multiply-adds each per head, half of
// them masked: 2 * B * H * T^2 * D in all. The backward pass recomputes the scores and forms
// dV, dP, dQ and dK: 2.5 times the forward.
double attention_flops(int64_t b, int64_t h, int64_t t, int64_t d) {
  return 2.0 * double(b * h) * double(t) * double(t) * double(d);
}

struct AttentionInputs {
  Tensor q, k, v;
};

AttentionInputs attention_inputs(int64_t b, int64_t h, int64_t t, int64_t d) {
  Generator gen(1);
  return {randn({b, h, t, d}, gen), randn({b, h, t, d}, gen), randn({b, h, t, d}, gen)};
}

void BM_AttentionForward(benchmark::State& state) {
  const int64_t b = state.range(0), h = state.range(1), t = state.range(2), d = state.range(3);
  AttentionInputs in = attention_inputs(b, h, t, d);
  if (!warm_up(state, [&] { ops::attention_forward(in.q, in.k, in.v); })) return;
  for (auto _ : state) {
    ops::AttentionOutput out = ops::attention_forward(in.q, in.k, in.v);
    benchmark::DoNotOptimize(out.out.data_ptr());
  }
  report_flops(state, attention_flops(b, h, t, d));
}

void BM_AttentionBackward(benchmark::State& state) {
  const int64_t b = state.range(0), h = state.range(1), t = state.range(2), d = state.range(3);
  AttentionInputs in = attention_inputs(b, h, t, d);
  Generator gen(2);
  Tensor gout = randn({b, h, t, d}, gen);
  ops::AttentionOutput fwd;
  if (!warm_up(state, [&] {
        fwd = ops::attention_forward(in.q, in.k, in.v);
        ops::attention_backward(in.q, in.k, in.v, fwd.out, fwd.lse, gout);
      }))
    return;
  for (auto _ : state) {
    ops::AttentionGrads g = ops::attention_backward(in.q, in.k, in.v, fwd.out, fwd.lse, gout);
    benchmark::DoNotOptimize(g.gq.data_ptr());
  }
  report_flops(state, 2.5 * attention_flops(b, h, t, d));
}

Tensor targets_for(int64_t n, int64_t vocab) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = (i * 7919) % vocab;
  return from_vector<int64_t>(ids, {n});
}

// Fused cross-entropy over logits [N, V]: forward reads the logits once.
void BM_CrossEntropyForward(benchmark::State& state) {
  const int64_t n = state.range(0), vocab = state.range(1);
  Generator gen(1);
  Tensor logits = randn({n, vocab}, gen), targets = targets_for(n, vocab);
  if (!warm_up(state, [&] { ops::cross_entropy_forward(logits, targets); })) return;
  for (auto _ : state) {
    ops::CrossEntropyOutput out = ops::cross_entropy_forward(logits, targets);
    benchmark::DoNotOptimize(out.loss.data_ptr());
  }
  report_bytes(state, kF32 * double(n * vocab));
}

// Backward reads the logits and writes their gradient.
void BM_CrossEntropyBackward(benchmark::State& state) {
  const int64_t n = state.range(0), vocab = state.range(1);
  Generator gen(1);
  Tensor logits = randn({n, vocab}, gen), targets = targets_for(n, vocab);
  Tensor gloss = scalar_tensor(1.0);
  ops::CrossEntropyOutput fwd;
  if (!warm_up(state, [&] {
        fwd = ops::cross_entropy_forward(logits, targets);
        ops::cross_entropy_backward(logits, targets, fwd.lse, fwd.valid, gloss);
      }))
    return;
  for (auto _ : state) {
    Tensor g = ops::cross_entropy_backward(logits, targets, fwd.lse, fwd.valid, gloss);
    benchmark::DoNotOptimize(g.data_ptr());
  }
  report_bytes(state, 2.0 * kF32 * double(n * vocab));
}

// References measured in the same run, so each rate above reads as a ratio.
// Memory roofline: a parallel memcpy (read + write) of `mib` MiB over the same threads.
void BM_ReferenceCopy(benchmark::State& state) {
  const size_t n = size_t(state.range(0)) << 20;
  std::vector<char> src(n, 1), dst(n, 0);
  for (auto _ : state) {
    cpu::parallel_for(int64_t(n), 1 << 20, [&](int64_t b, int64_t e) {
      std::memcpy(dst.data() + b, src.data() + b, size_t(e - b));
    });
    benchmark::DoNotOptimize(dst.data());
  }
  report_bytes(state, 2.0 * double(n));
}

// Compute roofline for attention: a plain Eigen GEMM of one head's score shape, T x D x T.
void BM_ReferenceEigenGemm(benchmark::State& state) {
  const Eigen::Index t = state.range(0), d = state.range(1);
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  Mat q = Mat::Random(t, d), k = Mat::Random(t, d), s(t, t);
  for (auto _ : state) {
    s.noalias() = q * k.transpose();
    benchmark::DoNotOptimize(s.data());
  }
  report_flops(state, 2.0 * double(t) * double(t) * double(d));
}

// GPT-2 small sizes: 2048 tokens of width 768; 12 heads of 64; a 50304-entry vocabulary.
BENCHMARK(BM_LayerNormForward)->ArgNames({"rows", "C"})->Args({2048, 768})->UseRealTime();
BENCHMARK(BM_LayerNormBackward)->ArgNames({"rows", "C"})->Args({2048, 768})->UseRealTime();
BENCHMARK(BM_Softmax)->ArgNames({"rows", "n"})->Args({2048, 1024})->UseRealTime();
BENCHMARK(BM_AttentionForward)
    ->ArgNames({"B", "H", "T", "D"})
    ->Args({4, 12, 256, 64})
    ->Args({4, 12, 1024, 64})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AttentionBackward)
    ->ArgNames({"B", "H", "T", "D"})
    ->Args({4, 12, 256, 64})
    ->Args({4, 12, 1024, 64})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CrossEntropyForward)
    ->ArgNames({"N", "V"})
    ->Args({256, 50304})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CrossEntropyBackward)
    ->ArgNames({"N", "V"})
    ->Args({256, 50304})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_ReferenceCopy)->ArgNames({"MiB"})->Arg(16)->Arg(128)->UseRealTime();
BENCHMARK(BM_ReferenceEigenGemm)->ArgNames({"T", "D"})->Args({1024, 64})->UseRealTime();

}  // namespace
}  // namespace tessera::bench
