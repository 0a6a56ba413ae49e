// The CPU AdamW at 256M parameters, on every path this CPU runs (cpu/cpu_adamw.h) and on the
// scalar reference (tests/core/adamw_scalar_reference.cpp, built without vectorisation or
// contraction), next to the machine's measured memory bandwidth in the same run.
//
// AdamW is memory-bound: 28 bytes per parameter with an f32 gradient (p, g, m, v read; p, m, v
// written) and also 28 with a bf16 gradient and a bf16 copy (2 fewer read, 2 more written), so
// its roofline is the bandwidth. That is measured first by two STREAM-like triads over arrays of
// 256M floats: a = b + s c (12 bytes counted, as STREAM does; the write-allocate read of `a` is
// hidden traffic) and a = a + s b in place (12 bytes, all of them real, as AdamW's are); and by
// AdamW's own pattern without its arithmetic (4 arrays read, 3 written in place, 28 bytes),
// which on few cores moves more than a triad does (more streams in flight per core). The best
// of the three is the reference.
//
// Counters: `bandwidth` (GB/s of the 28 bytes), `of_bandwidth` (that over the measured
// bandwidth), `vs_reference` (time of the scalar reference over this path's, same gradient and
// copy), `threads`. Every row uses all of the CPU backend's threads (OMP_NUM_THREADS sets them).
// TESSERA_BENCH_ADAMW_MPARAMS sets the size in millions of parameters (default 256).

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>

#include "bench/counters.h"
#include "tessera/core/cpu/cpu_adamw.h"
#include "tessera/core/cpu/parallel.h"
#include "tests/core/adamw_scalar_reference.h"

namespace tessera::bench {
namespace {

using cpu::AdamCopy, cpu::AdamGrad, cpu::AdamPath;

int64_t params() {
  const char* m = std::getenv("TESSERA_BENCH_ADAMW_MPARAMS");
  return int64_t(m != nullptr ? std::atoi(m) : 256) << 20;
}

double best_bandwidth = 0;    // bytes/s, the better triad
double reference_seconds[2];  // per iteration, f32 row and bf16 row

template <class T>
std::unique_ptr<T[]> uninitialised(int64_t n) {
  return std::unique_ptr<T[]>(new T[size_t(n)]);
}

// Runs body(begin, end) over [0, n) on every thread, one contiguous slice each.
template <class F>
void on_all_threads(int64_t n, F&& body) {
  cpu::parallel_for(n, 1 << 16, body);
}

// A cheap per-index value in [-1, 1): filling 4 GiB with a real generator would take longer
// than the benchmark.
float hash_unit(uint64_t i) {
  i ^= i >> 33;
  i *= 0xff51afd7ed558ccdull;
  i ^= i >> 33;
  return float(int64_t(i >> 40) - (int64_t(1) << 23)) / float(1 << 23);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One untimed pass, then the timed ones; records `bytes` per pass as a bandwidth reference.
template <class Pass>
void time_reference(benchmark::State& state, const Pass& pass, double bytes, const void* out) {
  pass();
  double seconds = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    seconds += seconds_since(t0);
    benchmark::DoNotOptimize(out);
  }
  best_bandwidth = std::max(best_bandwidth, bytes * double(state.iterations()) / seconds);
  report_bytes(state, bytes);
}

void BM_StreamTriad(benchmark::State& state) {
  const bool in_place = state.range(0) == 1;
  const int64_t n = params();
  auto a = uninitialised<float>(n), b = uninitialised<float>(n), c = uninitialised<float>(n);
  float *pa = a.get(), *pb = b.get(), *pc = c.get();
  on_all_threads(n, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) pa[i] = pb[i] = pc[i] = float(i & 1023);
  });
  const float k = 0.5f;
  auto pass = [&] {
    on_all_threads(n, [&](int64_t s, int64_t e) {
      if (in_place) {
        for (int64_t i = s; i < e; ++i) pa[i] = pa[i] + k * pb[i];
      } else {
        for (int64_t i = s; i < e; ++i) pa[i] = pb[i] + k * pc[i];
      }
    });
  };
  time_reference(state, pass, 12.0 * double(n), pa);
  state.counters["threads"] = omp_get_max_threads();
}

// The AdamW state, allocated on first use and shared by every row (5 GiB at 256M).
struct Arrays {
  int64_t n = 0;
  std::unique_ptr<float[]> p, g, m, v;
  std::unique_ptr<uint16_t[]> g16, copy;
};

Arrays& arrays() {
  static Arrays s;
  if (s.n != 0) return s;
  s.n = params();
  s.p = uninitialised<float>(s.n);
  s.g = uninitialised<float>(s.n);
  s.m = uninitialised<float>(s.n);
  s.v = uninitialised<float>(s.n);
  s.g16 = uninitialised<uint16_t>(s.n);
  s.copy = uninitialised<uint16_t>(s.n);
  on_all_threads(s.n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const uint64_t u = uint64_t(i) * 4;
      s.p[i] = 0.05f * hash_unit(u);
      s.g[i] = 1e-3f * hash_unit(u + 1);
      s.m[i] = 1e-4f * hash_unit(u + 2);
      s.v[i] = 1e-7f * (1.0f + hash_unit(u + 3));
      s.g16[i] = BFloat16::from_float(s.g[i]);
      s.copy[i] = 0;
    }
  });
  return s;
}

// AdamW's own traffic without its arithmetic: p, g, m, v read, p, m, v written in place (28
// bytes per element, as AdamW moves), over the AdamW rows' arrays. k is 0 at run time (the
// arrays keep their values) but unknown to the compiler, so every load and store happens.
void BM_StreamAdamPattern(benchmark::State& state) {
  Arrays& s = arrays();
  float *p = s.p.get(), *m = s.m.get(), *v = s.v.get();
  const float* g = s.g.get();
  volatile float zero = 0.0f;
  const float k = zero;
  auto pass = [&] {
    on_all_threads(s.n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float d = k * g[i];
        p[i] += d;
        m[i] += d;
        v[i] += d;
      }
    });
  };
  time_reference(state, pass, 28.0 * double(s.n), p);
  state.counters["threads"] = omp_get_max_threads();
}

// The scalar reference (reference = true) or a path; an f32 gradient and no copy, or a bf16
// gradient and a bf16 copy.
void adamw_row(benchmark::State& state, bool reference, AdamPath path, bool bf16) {
  if (!reference && !cpu::adamw_path_available(path)) {
    state.SkipWithError("this CPU lacks the path");
    return;
  }
  Arrays& s = arrays();
  cpu::AdamArrays a;
  a.p = s.p.get();
  a.m = s.m.get();
  a.v = s.v.get();
  a.g = bf16 ? static_cast<const void*>(s.g16.get()) : s.g.get();
  a.grad = bf16 ? AdamGrad::bf16 : AdamGrad::f32;
  a.copy = bf16 ? AdamCopy::bf16 : AdamCopy::none;
  a.rounded = s.copy.get();
  const cpu::AdamChunkFn chunk =
      reference ? &testing::adamw_scalar_reference : cpu::adamw_chunk(path);
  AdamWArgs args;
  args.lr = 1e-4f;
  args.weight_decay = 0.1f;
  args.step = 10;
  cpu::adamw_run(chunk, a, s.n, adamw_coefficients(args));  // warm: pages, threads
  double seconds = 0;
  for (auto _ : state) {
    ++args.step;
    const auto t0 = std::chrono::steady_clock::now();
    cpu::adamw_run(chunk, a, s.n, adamw_coefficients(args));
    seconds += seconds_since(t0);
    benchmark::DoNotOptimize(a.p);
  }
  const double per_iteration = seconds / double(state.iterations());
  const double bytes = 28.0 * double(s.n);
  if (reference) reference_seconds[bf16] = per_iteration;
  report_bytes(state, bytes);
  if (best_bandwidth > 0) state.counters["of_bandwidth"] = bytes / per_iteration / best_bandwidth;
  if (reference_seconds[bf16] > 0)
    state.counters["vs_reference"] = reference_seconds[bf16] / per_iteration;
  state.counters["threads"] = omp_get_max_threads();
}

BENCHMARK(BM_StreamTriad)
    ->ArgName("in_place")
    ->Arg(0)
    ->Arg(1)
    ->Iterations(5)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK(BM_StreamAdamPattern)->Iterations(5)->UseRealTime()->Unit(benchmark::kMillisecond);

// After the triads (the bandwidth the AdamW rows are set against), per row type the reference
// before the paths (the time they are set against): BM_AdamW/<path>/<f32 | bf16_copy>.
const bool registered = [] {
  auto add = [](const std::string& name, bool reference, AdamPath path, bool bf16) {
    benchmark::RegisterBenchmark(name.c_str(), adamw_row, reference, path, bf16)
        ->Iterations(4)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  };
  for (bool bf16 : {false, true}) {
    const char* kind = bf16 ? "bf16_copy" : "f32";
    add(str_cat("BM_AdamW/reference/", kind), true, AdamPath::scalar, bf16);
    for (AdamPath path : {AdamPath::scalar, AdamPath::avx2, AdamPath::avx512})
      add(str_cat("BM_AdamW/", cpu::adamw_path_name(path), "/", kind), false, path, bf16);
  }
  return true;
}();

}  // namespace
}  // namespace tessera::bench
