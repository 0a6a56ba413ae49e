// GPU ceilings and kernel rates on cuda:0, for bench/gpu_check.sh. Each benchmark times its
// work with the device synchronised around the timed region (manual time), and reports the
// bytes it must move (memory-bound kernels) or its FLOPs (GEMM, attention):
//   - BM_CopyBandwidth: a device-to-device copy of 1 GiB; the memory ceiling the memory-bound
//     kernels are measured against (read + write counted);
//   - BM_GemmBf16: cuBLASLt bf16 GEMM, 8192^3, f32 accumulation; the compute ceiling;
//   - BM_GemmBiasBf16Mlp and BM_GemmBiasGeluBf16Mlp: the MLP's c_fc (M = 8192, K = 768,
//     N = 3072) with the bias epilogue, and with GELU_AUX_BIAS (which also writes the
//     pre-activation): the difference is the GELU epilogue's cost;
//   - the kernels at GPT-2 124M shapes (B*T = 8192 rows, C = 768, V = 50304), bf16 where the
//     training step runs them in bf16, f32 for AdamW's master weights and state (with the
//     fused bf16 copy of the weights: BM_AdamWF32ToBf16, /stochastic:1 with stochastic rounding).
// In a build without the GPU backend, or on a machine without a GPU, every benchmark is
// skipped with the reason.

#include <chrono>
#include <optional>

#include "bench/counters.h"
#include "tessera/cuda/cuda.h"

namespace tessera::bench {
namespace {

constexpr int64_t kRows = 8192, kC = 768, kVocab = 50304;

// Opens cuda:0 once; the reason it cannot, if any.
const char* gpu_unavailable() {
#if defined(TESSERA_HAS_CUDA)
  static const char* reason = []() -> const char* {
    if (cuda::device_count() == 0) return "no CUDA device visible";
    cuda::init_device(0);
    return nullptr;
  }();
  return reason;
#else
  return "this build has no CUDA backend (TESSERA_WITH_CUDA=OFF)";
#endif
}

// Times `body` per iteration with the device idle before and after it.
template <class F>
void run_timed(benchmark::State& state, F&& body) {
  if (const char* why = gpu_unavailable()) {
    state.SkipWithError(why);
    return;
  }
  Backend& gpu = backend_for(Device::cuda());
  if (!warm_up(state, [&] {
        body();
        gpu.synchronize();
      }))
    return;
  for (auto _ : state) {
    gpu.synchronize();
    const auto start = std::chrono::steady_clock::now();
    body();
    gpu.synchronize();
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

Tensor device_randn(const Shape& shape, DType dtype, uint64_t seed) {
  Generator gen(seed);
  return randn(shape, gen, dtype, Device::cuda());
}

void BM_CopyBandwidth(benchmark::State& state) {
  const int64_t n = int64_t(1) << 28;  // 1 GiB of f32
  Tensor src, dst;
  run_timed(state, [&] {
    if (!src.defined()) {
      src = zeros({n}, DType::f32, Device::cuda());
      dst = empty({n}, DType::f32, Device::cuda());
    }
    backend_for(Device::cuda()).copy(src, dst);
  });
  report_bytes(state, 2.0 * 4.0 * double(n));
}

void BM_GemmBf16(benchmark::State& state) {
  const int64_t n = 8192;
  Tensor a, b, out;
  run_timed(state, [&] {
    if (!a.defined()) {
      a = device_randn({1, n, n}, DType::bf16, 1);
      b = device_randn({1, n, n}, DType::bf16, 2);
      out = empty({1, n, n}, DType::bf16, Device::cuda());
    }
    backend_for(Device::cuda()).matmul(a, b, Tensor(), out, MatmulArgs{});
  });
  report_flops(state, 2.0 * double(n) * double(n) * double(n));
}

// x [B*T, C] times c_fc's weight [4C, C] transposed, plus bias, as Backend calls in bf16.
void mlp_gemm(benchmark::State& state, bool gelu) {
  const int64_t n = 4 * kC;
  Tensor x, w, bias, pre, out;
  run_timed(state, [&] {
    if (!x.defined()) {
      x = device_randn({1, kRows, kC}, DType::bf16, 14);
      w = device_randn({1, n, kC}, DType::bf16, 15);
      bias = device_randn({n}, DType::bf16, 16);
      pre = empty({1, kRows, n}, DType::bf16, Device::cuda());
      out = empty({1, kRows, n}, DType::bf16, Device::cuda());
    }
    MatmulArgs args;
    args.trans_b = true;
    Backend& gpu = backend_for(Device::cuda());
    if (gelu) {
      gpu.matmul_gelu(x, w, bias, pre, out, args);
    } else {
      gpu.matmul(x, w, bias, pre, args);
    }
  });
  report_flops(state, 2.0 * double(kRows) * double(n) * double(kC));
}

void BM_GemmBiasBf16Mlp(benchmark::State& state) {
  mlp_gemm(state, false);
}

void BM_GemmBiasGeluBf16Mlp(benchmark::State& state) {
  mlp_gemm(state, true);
}

void BM_LayerNormForwardBf16(benchmark::State& state) {
  Tensor x, w, b;
  run_timed(state, [&] {
    if (!x.defined()) {
      x = device_randn({kRows, kC}, DType::bf16, 3);
      w = device_randn({kC}, DType::bf16, 4);
      b = device_randn({kC}, DType::bf16, 5);
    }
    benchmark::DoNotOptimize(ops::layernorm_forward(x, w, b).y.data_ptr());
  });
  report_bytes(state, 2.0 * 2.0 * double(kRows * kC));  // read x, write y (bf16)
}

void BM_GeluBf16(benchmark::State& state) {
  Tensor x;
  run_timed(state, [&] {
    if (!x.defined()) x = device_randn({kRows, 4 * kC}, DType::bf16, 6);
    benchmark::DoNotOptimize(ops::gelu(x).data_ptr());
  });
  report_bytes(state, 2.0 * 2.0 * double(kRows * 4 * kC));
}

void BM_SoftmaxF32(benchmark::State& state) {
  Tensor x;
  run_timed(state, [&] {
    if (!x.defined()) x = device_randn({kRows, 1024}, DType::f32, 7);
    benchmark::DoNotOptimize(ops::softmax(x, -1).data_ptr());
  });
  report_bytes(state, 2.0 * 4.0 * double(kRows * 1024));
}

void BM_CrossEntropyForwardBackwardBf16(benchmark::State& state) {
  Tensor logits, targets, gloss;
  run_timed(state, [&] {
    if (!logits.defined()) {
      logits = device_randn({kRows, kVocab}, DType::bf16, 8);
      targets = zeros({kRows}, DType::i64, Device::cuda());
      gloss = ones({}, DType::f32, Device::cuda());
    }
    ops::CrossEntropyOutput f = ops::cross_entropy_forward(logits, targets);
    benchmark::DoNotOptimize(
        ops::cross_entropy_backward(logits, targets, f.lse, f.valid, gloss).data_ptr());
  });
  // Forward reads the logits; backward reads them again and writes dlogits (bf16).
  report_bytes(state, 3.0 * 2.0 * double(kRows * kVocab));
}

// AdamW over 124M parameters (GPT-2 124M): f32 param, grad, m, v, and with `copy_dtype` set
// the compute copy the step rounds the updated param into, in the same pass.
void run_adamw(benchmark::State& state, const AdamWArgs& args, std::optional<DType> copy_dtype) {
  const int64_t n = 124'000'000;
  Tensor p, g, m, v, copy;
  run_timed(state, [&] {
    if (!p.defined()) {
      p = device_randn({n}, DType::f32, 9);
      g = device_randn({n}, DType::f32, 10);
      m = zeros({n}, DType::f32, Device::cuda());
      v = zeros({n}, DType::f32, Device::cuda());
      if (copy_dtype) copy = zeros({n}, *copy_dtype, Device::cuda());
    }
    ops::adamw_step_(p, g, m, v, args, copy);
  });
  // Read p, g, m, v; write p, m, v (f32), plus the copy's bytes.
  const double copy_bytes = copy_dtype ? double(dtype_size(*copy_dtype)) : 0.0;
  report_bytes(state, (7.0 * 4.0 + copy_bytes) * double(n));
}

void BM_AdamWF32(benchmark::State& state) {
  run_adamw(state, AdamWArgs{}, std::nullopt);
}

// The bf16 mixed-precision step: 30 bytes per element; arg 1 rounds stochastically (a Philox
// call per four elements).
void BM_AdamWF32ToBf16(benchmark::State& state) {
  AdamWArgs args;
  args.stochastic_rounding = state.range(0) != 0;
  run_adamw(state, args, DType::bf16);
}

void BM_AttentionForwardBf16(benchmark::State& state) {
  const int64_t b = 8, h = 12, t = 1024, d = 64;
  Tensor q, k, v;
  run_timed(state, [&] {
    if (!q.defined()) {
      q = device_randn({b, h, t, d}, DType::bf16, 11);
      k = device_randn({b, h, t, d}, DType::bf16, 12);
      v = device_randn({b, h, t, d}, DType::bf16, 13);
    }
    benchmark::DoNotOptimize(ops::attention_forward(q, k, v).out.data_ptr());
  });
  // Causal: the two matmuls (QK^T and PV) over half of the T x T scores.
  report_flops(state, 2.0 * 2.0 * double(b * h) * double(t) * double(t) * double(d) / 2.0);
}

BENCHMARK(BM_CopyBandwidth)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GemmBf16)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GemmBiasBf16Mlp)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GemmBiasGeluBf16Mlp)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LayerNormForwardBf16)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GeluBf16)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SoftmaxF32)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CrossEntropyForwardBackwardBf16)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AdamWF32)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AdamWF32ToBf16)
    ->ArgName("stochastic")
    ->Arg(0)
    ->Arg(1)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AttentionForwardBf16)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tessera::bench
