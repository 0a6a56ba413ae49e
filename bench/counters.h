#pragma once
// Counters shared by the benchmarks: each reports the work of one iteration (FLOPs or bytes)
// and the achieved rate, so results read as GFLOP/s or GB/s next to the time.

#include <benchmark/benchmark.h>

#include <cstdint>
#include <exception>

#include "tessera/tessera.h"

namespace tessera::bench {

// FLOPs per iteration, and the achieved rate over the benchmark's time (wall time with
// UseRealTime()), printed with an SI prefix: "FLOPS=31.2G/s" is 31.2 GFLOP/s.
inline void report_flops(benchmark::State& state, double flops) {
  state.counters["FLOPs"] = benchmark::Counter(flops);
  state.counters["FLOPS"] =
      benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

// Bytes each iteration must move at least (every input read once, every output written
// once), and the achieved bandwidth: "bandwidth=12.5G/s" is 12.5 GB/s.
inline void report_bytes(benchmark::State& state, double bytes) {
  state.counters["bytes"] = benchmark::Counter(bytes);
  state.counters["bandwidth"] =
      benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}

// Runs `body` once outside the timed loop: it warms the allocator's cache, and an op that is
// not available (a backend that throws "not implemented") marks the benchmark skipped with
// the error instead of aborting the whole run.
template <class F>
bool warm_up(benchmark::State& state, F&& body) {
  try {
    body();
    return true;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return false;
  }
}

}  // namespace tessera::bench
