// One full GPT-2 124M training step (forward, backward, AdamW), the work of llm.c's CPU
// reference trainer: gpt2-d12 (12 layers, 12 heads, width 768, vocabulary 50257 padded to
// 50304, 1024 positions), B=4, T=64, fp32, AdamW (lr 1e-4, betas 0.9/0.999, eps 1e-8, no
// weight decay), no clipping. bench/train_step_vs_pytorch.py runs it next to a plain PyTorch
// model of the same shape (bench/pytorch_gpt2.py) and prints the side-by-side table.
//
// Counters: tokens/s; GFLOP/s by nanoGPT's estimate (estimate_mfu): 6*N + 12*L*C*T FLOPs per
// token, with N the parameters less the position table (wpe does no multiply-adds; the tied
// wte does, as the head) and 12*L*C*T the attention score and value products, forward and
// backward, counted without the causal halving; peak RSS of the process (getrusage).
// BM_TrainStepPhases times forward, backward and the optimizer separately (ms each).
//
// Threads: OMP_NUM_THREADS if set, else 2 (the workload).

#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <memory>

#include "bench/counters.h"

namespace tessera::bench {
namespace {

constexpr int64_t kBatch = 4, kSeq = 64;

// The model, optimizer and batch, built once and shared by every benchmark in the process.
struct Workload {
  nn::GPTConfig config = nn::GPTConfig::preset("gpt2-d12");
  nn::GPT model{config};
  nn::AdamW optimizer{model.named_parameters(), options()};
  Tensor idx, targets;

  Workload() {
    Generator gen(42);
    idx = random_tokens(gen);
    targets = random_tokens(gen);
  }

  // Uniform ids in [0, vocab_size): f64 draws, so that scaling by 50257 cannot round up to it.
  Tensor random_tokens(Generator& gen) const {
    Tensor u = rand({kBatch, kSeq}, gen, DType::f64);
    return ops::cast(ops::mul(u, double(config.vocab_size)), DType::i64);
  }

  static nn::AdamWOptions options() {
    nn::AdamWOptions o;
    o.lr = 1e-4;
    o.beta1 = 0.9;
    o.beta2 = 0.999;
    o.eps = 1e-8;
    o.weight_decay = 0.0;
    return o;
  }

  // FLOPs of one step by nanoGPT's per-token estimate (see the file comment).
  double flops_per_step() const {
    const double n = double(model.num_parameters() - config.block_size * config.n_embd);
    const double attention = 12.0 * double(config.n_layer * config.n_embd * kSeq);
    return double(kBatch * kSeq) * (6.0 * n + attention);
  }

  float step() {
    optimizer.zero_grad();
    Tensor loss = model.loss(idx, targets);
    loss.backward();
    optimizer.step();
    return loss.item<float>();
  }
};

Workload& workload() {
  static auto w = [] {
    const char* env = std::getenv("OMP_NUM_THREADS");
    const int n = env != nullptr ? std::atoi(env) : 0;
    set_num_threads(n > 0 ? n : 2);
    return std::make_unique<Workload>();
  }();
  return *w;
}

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

void report(benchmark::State& state, const Workload& w, float loss) {
  report_flops(state, w.flops_per_step());
  state.counters["tokens/s"] =
      benchmark::Counter(double(kBatch * kSeq), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_rss_MiB"] = peak_rss_mib();
  state.counters["threads"] = double(num_threads());
  state.counters["params"] = double(w.model.num_parameters());
  state.counters["loss"] = loss;
}

void BM_TrainStep(benchmark::State& state) {
  Workload& w = workload();
  float loss = 0;
  // Two untimed steps: the first fills the allocator's cache and creates AdamW's moments.
  if (!warm_up(state, [&] { w.step(), loss = w.step(); })) return;
  for (auto _ : state) loss = w.step();
  report(state, w, loss);
}

// The same step with a clock read between phases; the loss.item() that ends the forward
// phase is the only synchronisation a CPU run needs.
void BM_TrainStepPhases(benchmark::State& state) {
  using Clock = std::chrono::steady_clock;
  Workload& w = workload();
  float loss = 0;
  if (!warm_up(state, [&] { loss = w.step(); })) return;
  double forward = 0, backward = 0, optimizer = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    w.optimizer.zero_grad();
    Tensor l = w.model.loss(w.idx, w.targets);
    loss = l.item<float>();
    const auto t1 = Clock::now();
    l.backward();
    const auto t2 = Clock::now();
    w.optimizer.step();
    const auto t3 = Clock::now();
    forward += std::chrono::duration<double, std::milli>(t1 - t0).count();
    backward += std::chrono::duration<double, std::milli>(t2 - t1).count();
    optimizer += std::chrono::duration<double, std::milli>(t3 - t2).count();
  }
  const double n = double(state.iterations());
  state.counters["forward_ms"] = forward / n;
  state.counters["backward_ms"] = backward / n;
  state.counters["optimizer_ms"] = optimizer / n;
  report(state, w, loss);
}

BENCHMARK(BM_TrainStep)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TrainStepPhases)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace tessera::bench
