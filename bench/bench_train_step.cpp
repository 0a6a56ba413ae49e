// One full GPT-2 124M training step (forward, backward, AdamW). By default the work of llm.c's
// CPU reference trainer: gpt2-d12 (12 layers, 12 heads, width 768, vocabulary 50257 padded to
// 50304, 1024 positions), B=4, T=64, fp32, AdamW (lr 1e-4, betas 0.9/0.999, eps 1e-8, no
// weight decay), no clipping. bench/train_step_vs_pytorch.py runs it next to a plain PyTorch
// model of the same shape (bench/pytorch_gpt2.py) and prints the side-by-side table.
//
// Flags (before or among Google Benchmark's; `--name=value` or `--name value`):
//   --device cpu|cuda|cuda-sim  cuda is the GPU; cuda-sim the kernel simulator (slow: tiny
//                               models only, to try the device path without a GPU)
//   --precision fp32|bf16       bf16: bf16 weights and activations, fp32 master weights and
//                               AdamW state (nn::MixedPrecision, as `tessera train` runs it)
//   --batch B --seq T           default 4 and 64
//   --preset NAME --model JSON  the model: a GPTConfig preset, then JSON overrides
//   --peak-tflops X             the peak for MFU; default on cuda in bf16: 989, the H200 SXM's
//                               dense bf16 tensor-core rate (NVIDIA's H200 datasheet gives
//                               1,979 TFLOP/s "with sparsity"; dense is half)
//   --gemm-tflops X             a measured GEMM rate (bench_gpu's BM_GemmBf16) to report the
//                               achieved rate against as well
// The GPU configuration of bench/gpu_check.sh: --device cuda --precision bf16 --batch 8
// --seq 1024.
//
// Counters: tokens/s; FLOPS by nanoGPT's estimate (estimate_mfu): 6*N + 12*L*C*T FLOPs per
// token, with N the parameters less the position table (wpe does no multiply-adds; the tied
// wte does, as the head) and 12*L*C*T the attention score and value products, forward and
// backward, counted without the causal halving; `mfu` and `of_gemm` (fractions of the two
// rates above) where given; peak RSS of the process (getrusage) and, on cuda, the device
// allocator's peak. Each step on a device ends synchronised, so wall time is the step's.
// BM_TrainStepPhases times forward, backward and the optimizer separately (ms each).
//
// Threads: OMP_NUM_THREADS if set, else 2 (the CPU workload).

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/counters.h"
#include "tessera/cuda/cuda.h"

namespace tessera::bench {
namespace {

struct Options {
  std::string device = "cpu";
  std::string precision = "fp32";
  int64_t batch = 4, seq = 64;
  std::string preset = "gpt2-d12";
  std::string model_json;
  double peak_tflops = 0;  // 0: the default for the device and precision, if any
  double gemm_tflops = 0;  // 0: not given
};

Options& options() {
  static Options o;
  return o;
}

Device open_device(const std::string& name) {
  if (name == "cpu") return Device::cpu();
  if (name == "cuda-sim") {
    cuda::use_simulated_device();
    return Device::cuda(0);
  }
  TESSERA_CHECK(name == "cuda", "bench_train_step: --device must be cpu, cuda or cuda-sim, got '",
                name, "'");
#if defined(TESSERA_HAS_CUDA)
  TESSERA_CHECK(cuda::device_count() > 0,
                "bench_train_step: --device cuda: no CUDA device visible");
  cuda::init_device(0);
  return Device::cuda(0);
#else
  detail::throw_error("bench_train_step: --device cuda: this build has no CUDA backend");
#endif
}

// The model, optimizer and batch, built once and shared by every benchmark in the process.
// Under bf16 `compute` holds the bf16 model that runs forward and backward, and `model` its
// fp32 master weights, which AdamW updates.
struct Workload {
  Options opt = options();
  Device device = open_device(opt.device);
  nn::Precision precision = nn::parse_precision(opt.precision);
  nn::GPTConfig config = model_config();
  nn::GPT model{config};
  std::unique_ptr<nn::GPT> compute;
  std::unique_ptr<nn::MixedPrecision> mixed;
  std::unique_ptr<nn::AdamW> optimizer;  // built on the device: it allocates the moments there
  Tensor idx, targets;

  Workload() {
    TESSERA_CHECK(precision != nn::Precision::fp16,
                  "bench_train_step: --precision must be fp32 or bf16, got fp16");
    nn::move_to_device(model.state_dict(), device);
    if (precision != nn::Precision::fp32) {
      compute = std::make_unique<nn::GPT>(config, nn::compute_dtype(precision));
      nn::move_to_device(compute->state_dict(), device);
      mixed = std::make_unique<nn::MixedPrecision>(precision, model.named_parameters(),
                                                   compute->named_parameters());
    }
    optimizer = std::make_unique<nn::AdamW>(model.named_parameters(), adamw_options());
    Generator gen(42);
    idx = ops::to(random_tokens(gen), device);
    targets = ops::to(random_tokens(gen), device);
  }

  nn::GPTConfig model_config() const {
    nn::GPTConfig c = nn::GPTConfig::preset(opt.preset);
    if (!opt.model_json.empty())
      c = nn::GPTConfig::from_json(nlohmann::json::parse(opt.model_json), c);
    TESSERA_CHECK(opt.seq >= 1 && opt.seq <= c.block_size && opt.batch >= 1,
                  "bench_train_step: --seq must be in [1, ", c.block_size,
                  "] and --batch >= 1, got ", opt.seq, " and ", opt.batch);
    return c;
  }

  // Uniform ids in [0, vocab_size): f64 draws, so that scaling by 50257 cannot round up to it.
  Tensor random_tokens(Generator& gen) const {
    Tensor u = rand({opt.batch, opt.seq}, gen, DType::f64);
    return ops::cast(ops::mul(u, double(config.vocab_size)), DType::i64);
  }

  static nn::AdamWOptions adamw_options() {
    nn::AdamWOptions o;
    o.lr = 1e-4;
    o.beta1 = 0.9;
    o.beta2 = 0.999;
    o.eps = 1e-8;
    o.weight_decay = 0.0;
    return o;
  }

  nn::GPT& net() { return compute ? *compute : model; }
  int64_t tokens_per_step() const { return opt.batch * opt.seq; }

  // FLOPs of one step by nanoGPT's per-token estimate (see the file comment).
  double flops_per_step() const {
    const double n = double(model.num_parameters() - config.block_size * config.n_embd);
    const double attention = 12.0 * double(config.n_layer * config.n_embd * opt.seq);
    return double(tokens_per_step()) * (6.0 * n + attention);
  }

  // The rate MFU is measured against, in TFLOP/s (0: none known).
  double peak_tflops() const {
    if (opt.peak_tflops > 0) return opt.peak_tflops;
    return opt.device == "cuda" && precision == nn::Precision::bf16 ? 989.0 : 0.0;
  }

  void synchronize() { backend_for(device).synchronize(); }

  // Forward with the loss; the loss.item() is a synchronisation on a device.
  Tensor forward(float* loss_value) {
    optimizer->zero_grad();
    Tensor loss = net().loss(idx, targets);
    *loss_value = loss.item<float>();
    return loss;
  }
  void backward(const Tensor& loss) {
    if (!mixed) return loss.backward();
    mixed->scale_loss(loss).backward();
    mixed->accumulate_grads();
  }
  // fp32 steps the optimizer directly (the CPU workload, unchanged); bf16 through the
  // mixed-precision step, which adds the global gradient norm (its overflow check).
  void update() {
    if (mixed)
      mixed->step(*optimizer, 0.0);
    else
      optimizer->step();
  }

  float step() {
    float loss = 0;
    backward(forward(&loss));
    update();
    synchronize();
    return loss;
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

// `seconds`: the wall time of the timed loop, for the fractions of a peak.
void report(benchmark::State& state, const Workload& w, float loss, double seconds) {
  const double flops = w.flops_per_step();
  report_flops(state, flops);
  state.counters["tokens/s"] = benchmark::Counter(double(w.tokens_per_step()),
                                                  benchmark::Counter::kIsIterationInvariantRate);
  const double achieved = seconds > 0 ? flops * double(state.iterations()) / seconds : 0.0;
  if (w.peak_tflops() > 0) {
    state.counters["mfu"] = achieved / (w.peak_tflops() * 1e12);
    state.counters["peak_TFLOPS"] = w.peak_tflops();
  }
  if (w.opt.gemm_tflops > 0) {
    state.counters["of_gemm"] = achieved / (w.opt.gemm_tflops * 1e12);
    state.counters["gemm_TFLOPS"] = w.opt.gemm_tflops;
  }
  state.counters["peak_rss_MiB"] = peak_rss_mib();
  if (w.device.is_cuda())
    state.counters["peak_device_MiB"] =
        double(allocator_for(w.device).stats().peak_bytes) / (1024.0 * 1024.0);
  state.counters["threads"] = double(num_threads());
  state.counters["params"] = double(w.model.num_parameters());
  state.counters["batch"] = double(w.opt.batch);
  state.counters["seq"] = double(w.opt.seq);
  state.counters["loss"] = loss;
}

void BM_TrainStep(benchmark::State& state) {
  Workload& w = workload();
  float loss = 0;
  // Two untimed steps: they fill the allocator's cache.
  if (!warm_up(state, [&] { w.step(), loss = w.step(); })) return;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) loss = w.step();
  report(state, w, loss,
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

// The same step with a clock read between phases; on a device each phase ends synchronised
// (the forward's loss.item() is the only synchronisation a CPU run needs).
void BM_TrainStepPhases(benchmark::State& state) {
  using Clock = std::chrono::steady_clock;
  Workload& w = workload();
  float loss = 0;
  if (!warm_up(state, [&] { loss = w.step(); })) return;
  double forward = 0, backward = 0, optimizer = 0;
  for (auto _ : state) {
    const auto t0 = Clock::now();
    Tensor l = w.forward(&loss);
    const auto t1 = Clock::now();
    w.backward(l);
    w.synchronize();
    const auto t2 = Clock::now();
    w.update();
    w.synchronize();
    const auto t3 = Clock::now();
    forward += std::chrono::duration<double, std::milli>(t1 - t0).count();
    backward += std::chrono::duration<double, std::milli>(t2 - t1).count();
    optimizer += std::chrono::duration<double, std::milli>(t3 - t2).count();
  }
  const double n = double(state.iterations());
  state.counters["forward_ms"] = forward / n;
  state.counters["backward_ms"] = backward / n;
  state.counters["optimizer_ms"] = optimizer / n;
  report(state, w, loss, (forward + backward + optimizer) / 1e3);
}

// The step under --recompute none (0), selective (1) and full (2): its time, and the bytes
// the forward pass leaves saved for backward (act_MiB: live after the forward minus before)
// and the allocator's peak above the pre-forward level during backward, the recompute's
// transient included (bwd_peak_MiB). Compare the rows of one run: time / none's time is the
// recompute's cost, act_MiB / none's the memory it saves. The FLOP counters stay nanoGPT's
// (the model's work, not the recomputed extra), so MFU falls by the recompute's cost.
void BM_TrainStepRecompute(benchmark::State& state) {
  Workload& w = workload();
  const auto mode = nn::RecomputeMode(state.range(0));
  w.net().set_recompute({mode});
  Allocator& alloc = allocator_for(w.device);
  float loss = 0;
  if (!warm_up(state, [&] { w.step(), loss = w.step(); })) return;
  int64_t saved = 0, peak = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    w.optimizer->zero_grad();  // frees last step's gradients before the level is read
    const int64_t before = alloc.stats().live_bytes;
    Tensor l = w.forward(&loss);
    saved = alloc.stats().live_bytes - before;
    alloc.reset_peak();
    w.backward(l);
    l = Tensor();
    peak = alloc.stats().peak_bytes - before;
    w.update();
    w.synchronize();
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  w.net().set_recompute({});
  report(state, w, loss, seconds);
  state.SetLabel(nn::recompute_mode_name(mode));
  state.counters["act_MiB"] = double(saved) / (1024.0 * 1024.0);
  state.counters["bwd_peak_MiB"] = double(peak) / (1024.0 * 1024.0);
}

BENCHMARK(BM_TrainStep)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TrainStepPhases)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TrainStepRecompute)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->UseRealTime();

// Takes this benchmark's flags out of argv (the rest go to Google Benchmark); false, with a
// message, for a flag without its value or a malformed number.
bool parse_flags(int& argc, char** argv) {
  Options& o = options();
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    std::optional<std::string> value;
    bool missing = false;  // one of our flags, last on the line with no value after it
    const auto flag = [&](const char* name) {
      const std::string prefix = std::string("--") + name;
      if (arg.rfind(prefix + "=", 0) == 0) {
        value = arg.substr(prefix.size() + 1);
        return true;
      }
      if (arg == prefix) {
        if (i + 1 == argc) {
          missing = true;
          return false;
        }
        value = argv[++i];
        return true;
      }
      return false;
    };
    try {
      if (flag("device")) {
        o.device = *value;
      } else if (flag("precision")) {
        o.precision = *value;
      } else if (flag("batch")) {
        o.batch = std::stoll(*value);
      } else if (flag("seq")) {
        o.seq = std::stoll(*value);
      } else if (flag("preset")) {
        o.preset = *value;
      } else if (flag("model")) {
        o.model_json = *value;
      } else if (flag("peak-tflops")) {
        o.peak_tflops = std::stod(*value);
      } else if (flag("gemm-tflops")) {
        o.gemm_tflops = std::stod(*value);
      } else if (missing) {
        std::cerr << "bench_train_step: " << arg << " needs a value\n";
        return false;
      } else {
        rest.push_back(argv[i]);
      }
    } catch (const std::exception&) {
      std::cerr << "bench_train_step: " << arg << ": expected a number, got '" << *value << "'\n";
      return false;
    }
  }
  argc = int(rest.size());
  std::copy(rest.begin(), rest.end(), argv);
  return true;
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  if (!tessera::bench::parse_flags(argc, argv)) return 1;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // Builds the workload (and opens the device) before any benchmark runs, so that a device or
  // flag error ends the run with its message instead of skipping every benchmark.
  try {
    tessera::bench::workload();
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
