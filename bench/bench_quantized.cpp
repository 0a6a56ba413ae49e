// Weight-only INT8 (Q8_0) against f32: the linear layer alone and a whole decode step, at
// batch 1 to 16, in the same run; and f32 on Eigen alone (BM_*F32Eigen: the thin GEMM of
// cpu/thin_gemm.h switched off), which the thin GEMM replaces for up to 8 rows.
//
//   BM_LinearF32 / BM_LinearQ8   x [M, K] times a [N, K] weight: a GPT-2-small MLP projection
//                                (768 -> 3072) and its Llama-7B-sized cousin (4096 -> 11008).
//                                bytes = the weight read once (4 B/element f32, 34/32 Q8_0)
//                                plus x and y; FLOPs = 2 M N K. Batch 1 is a memory-bound GEMV,
//                                where Q8_0 reads 3.76x fewer weight bytes.
//   BM_LinearW8A8                the same with x's rows quantized to int8 in the op (W8A8), the
//                                products int8 x int8.
//   BM_LinearW8A8Path            BM_LinearW8A8 on each vector path the build has (the label:
//                                avx2, avx512_vnni), so that they compare in one run.
//   BM_DecodeF32 / BM_DecodeQ8   one decode step (a token per sequence against a KV cache of
//                                64 positions) of an 87M-parameter GPT (12 x 768), M sequences:
//                                decode tokens/s = M / time. BM_DecodeW8A8: the Q8_0 model
//                                with int8 activations; BM_DecodeW8A8Path: that on each path.

#include <vector>

#include "bench/counters.h"
#include "tessera/core/cpu/linear_w8a8_paths.h"
#include "tessera/core/cpu/thin_gemm.h"

namespace tessera::bench {
namespace {

void set_linear_counters(benchmark::State& state, int64_t m, int64_t k, int64_t n,
                         double weight_bytes) {
  report_flops(state, 2.0 * double(m) * double(n) * double(k));
  report_bytes(state, weight_bytes + 4.0 * double(m) * double(k + n));
  state.counters["threads"] = double(num_threads());
}

// The thin GEMM switched off for one benchmark (Eigen's GEBP, or its GEMV at M = 1), back on
// after it.
struct EigenOnly {
  EigenOnly() { cpu::set_thin_gemm_enabled(false); }
  ~EigenOnly() { cpu::set_thin_gemm_enabled(true); }
};

void BM_LinearF32(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Generator gen(1);
  const Tensor x = randn({m, k}, gen), w = randn({n, k}, gen);
  if (!warm_up(state, [&] { ops::matmul(x, w, false, true); })) return;
  for (auto _ : state) {
    Tensor y = ops::matmul(x, w, false, true);
    benchmark::DoNotOptimize(y.data_ptr());
  }
  set_linear_counters(state, m, k, n, 4.0 * double(n * k));
}

void BM_LinearF32Eigen(benchmark::State& state) {
  const EigenOnly eigen;
  BM_LinearF32(state);
}

// x [M, K] times a Q8_0 weight through `linear` (ops::linear_q8, or ops::linear_w8a8, whose
// time includes quantizing x per row).
template <Tensor (*linear)(const Tensor&, const ops::Q8Weight&, const Tensor&)>
void BM_LinearInt8(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  Generator gen(1);
  const Tensor x = randn({m, k}, gen);
  const ops::Q8Weight w = ops::quantize_q8(randn({n, k}, gen));
  if (!warm_up(state, [&] { linear(x, w, Tensor()); })) return;
  for (auto _ : state) {
    Tensor y = linear(x, w, Tensor());
    benchmark::DoNotOptimize(y.data_ptr());
  }
  set_linear_counters(state, m, k, n, 34.0 / 32.0 * double(n * k));
}

void BM_LinearQ8(benchmark::State& state) {
  BM_LinearInt8<ops::linear_q8>(state);
}
void BM_LinearW8A8(benchmark::State& state) {
  BM_LinearInt8<ops::linear_w8a8>(state);
}

// The W8A8 kernel held to one path (cpu::W8A8Path, the benchmark's last argument) for one
// benchmark, back to the fastest after it.
struct W8A8PathOnly {
  explicit W8A8PathOnly(benchmark::State& state, int arg)
      : fastest_(cpu::w8a8_path()), path_(cpu::W8A8Path(state.range(arg))) {
    cpu::set_w8a8_path(path_);
    state.SetLabel(cpu::w8a8_path_name(path_));
  }
  ~W8A8PathOnly() { cpu::set_w8a8_path(fastest_); }
  cpu::W8A8Path fastest_, path_;
};

void BM_LinearW8A8Path(benchmark::State& state) {
  const W8A8PathOnly path(state, 3);
  BM_LinearW8A8(state);
}

void linear_shapes(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 2, 4, 8, 16}) {
    b->Args({m, 768, 3072});
    b->Args({m, 4096, 11008});
  }
  b->ArgNames({"M", "K", "N"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

// linear_shapes on each vector path of the W8A8 kernel (the portable loop is a test's).
void linear_shapes_per_path(benchmark::internal::Benchmark* b) {
  for (cpu::W8A8Path path : cpu::w8a8_paths_available())
    if (path != cpu::W8A8Path::portable)
      for (int64_t m : {1, 2, 4, 8, 16}) {
        b->Args({m, 768, 3072, int64_t(path)});
        b->Args({m, 4096, 11008, int64_t(path)});
      }
  b->ArgNames({"M", "K", "N", "path"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

nn::GPTConfig decode_config() {
  nn::GPTConfig c = nn::GPTConfig::preset("gpt2-d12");
  c.vocab_size = 2048;
  c.block_size = 128;
  return c;
}

enum class Weights { f32, q8, w8a8 };

// One decode step for M sequences whose caches hold 64 positions.
void decode(benchmark::State& state, Weights weights) {
  const int64_t m = state.range(0);
  nn::GPTConfig c = decode_config();
  nn::GPT model(c);
  if (weights != Weights::f32) model.quantize_q8();
  if (weights == Weights::w8a8) model.set_int8_activations(true);
  model.eval();
  NoGradGuard no_grad;
  nn::KVCache cache(c, m);
  // Token ids i * 7 mod vocab: the values do not change the work.
  auto ids = [&](int64_t t) {
    std::vector<int64_t> v(static_cast<size_t>(m * t));
    for (size_t i = 0; i < v.size(); ++i) v[i] = int64_t(i * 7) % c.vocab_size;
    return from_vector<int64_t>(v, Shape{m, t});
  };
  model.forward(ids(64), &cache);  // fill 64 positions
  const Tensor next = ids(1);
  for (auto _ : state) {
    state.PauseTiming();
    cache.reset();
    cache.advance(64);  // the same 64 cached positions every step
    state.ResumeTiming();
    Tensor logits = model.forward(next, &cache);
    benchmark::DoNotOptimize(logits.data_ptr());
  }
  state.counters["tokens/s"] =
      benchmark::Counter(double(m), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = double(num_threads());
}

void BM_DecodeF32(benchmark::State& state) {
  decode(state, Weights::f32);
}
void BM_DecodeQ8(benchmark::State& state) {
  decode(state, Weights::q8);
}
void BM_DecodeW8A8(benchmark::State& state) {
  decode(state, Weights::w8a8);
}
void BM_DecodeW8A8Path(benchmark::State& state) {
  const W8A8PathOnly path(state, 1);
  decode(state, Weights::w8a8);
}
void BM_DecodeF32Eigen(benchmark::State& state) {
  const EigenOnly eigen;
  decode(state, Weights::f32);
}

BENCHMARK(BM_LinearF32)->Apply(linear_shapes);
BENCHMARK(BM_LinearF32Eigen)->Apply(linear_shapes);
BENCHMARK(BM_LinearQ8)->Apply(linear_shapes);
BENCHMARK(BM_LinearW8A8)->Apply(linear_shapes);
BENCHMARK(BM_LinearW8A8Path)->Apply(linear_shapes_per_path);
// Batches 1 to 16: a step's cost against its batch, a + c·M, is what decides whether batching
// more sequences costs their latency (docs/benchmarks.md, serving).
void decode_batches(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 2, 4, 8, 16}) b->Arg(m);
  b->ArgName("M")->UseRealTime()->Unit(benchmark::kMillisecond);
}

void decode_batches_per_path(benchmark::internal::Benchmark* b) {
  for (cpu::W8A8Path path : cpu::w8a8_paths_available())
    if (path != cpu::W8A8Path::portable)
      for (int64_t m : {1, 2, 4, 8, 16}) b->Args({m, int64_t(path)});
  b->ArgNames({"M", "path"})->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_DecodeF32)->Apply(decode_batches);
BENCHMARK(BM_DecodeF32Eigen)->Apply(decode_batches);
BENCHMARK(BM_DecodeQ8)->Apply(decode_batches);
BENCHMARK(BM_DecodeW8A8)->Apply(decode_batches);
BENCHMARK(BM_DecodeW8A8Path)->Apply(decode_batches_per_path);

}  // namespace
}  // namespace tessera::bench

