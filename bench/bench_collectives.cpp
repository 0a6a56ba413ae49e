// Collective bus bandwidth of the Communicator: all_reduce (sum), reduce_scatter (sum) and
// all_gather of f32 buffers from 1 KiB to 64 MiB, with nccl-tests' definitions
// (github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md):
//
//   size     the bytes of the whole buffer: the all-reduce's tensor, the reduce-scatter's
//            input, the all-gather's output (n ranks' chunks together)
//   algbw    size / time
//   busbw    algbw * 2(n-1)/n for all-reduce, algbw * (n-1)/n for reduce-scatter and
//            all-gather: the rate each link must sustain, comparable across n and with the
//            hardware's peak bandwidth
//
// Run under MPI:  mpiexec -n 4 build/bench/bench_collectives
//
// Google Benchmark runs in every rank (bench/mpi_bench.h): each size runs a fixed count,
// computed from the size alone, and an iteration's time is the slowest rank's. Only rank 0
// prints.
//
// Memory-bound: over MPI's shared-memory transport the ceiling is the machine's copy
// bandwidth divided by the copies each algorithm makes; with more ranks than cores the ranks
// also wait for each other's time slices, which the figures include.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "tessera/tessera.h"

#if TESSERA_HAS_MPI
#include "bench/mpi_bench.h"

namespace tessera::bench {
namespace {

enum class Collective { all_reduce, reduce_scatter, all_gather };

double bus_factor(Collective c, int n) {
  return c == Collective::all_reduce ? 2.0 * (n - 1) / n : double(n - 1) / n;
}

// Enough iterations for a stable figure at small sizes, few at large ones; the same on every
// rank because it depends on the size only.
int64_t iterations_for(int64_t bytes) {
  return std::clamp<int64_t>((int64_t(256) << 20) / bytes, 5, 200);
}

void run(benchmark::State& state, Collective c) {
  parallel::Communicator& comm = world();
  const int n = comm.size();
  // Whole-buffer elements, rounded to a multiple of n so the chunks are equal.
  const int64_t bytes = state.range(0);
  const int64_t count = std::max<int64_t>(bytes / 4 / n, 1) * n;
  Tensor whole = full(Shape{count}, 1.0), part = full(Shape{count / n}, 1.0);
  auto once = [&] {
    switch (c) {
      case Collective::all_reduce:
        comm.all_reduce(whole);
        break;
      case Collective::reduce_scatter:
        comm.reduce_scatter(whole, part);
        break;
      case Collective::all_gather:
        comm.all_gather(part, whole);
        break;
    }
  };
  once();  // warm-up: the allocator's cache and MPI's connections
  for (auto _ : state) state.SetIterationTime(slowest_seconds(once));
  // Rates over the manual (slowest-rank) time: "busbw=1.2G/s" is 1.2 GB/s.
  const double size = double(count) * 4.0;
  using benchmark::Counter;
  state.counters["bytes"] = Counter(size, Counter::kDefaults, Counter::kIs1024);
  state.counters["algbw"] = Counter(size, Counter::kIsIterationInvariantRate);
  state.counters["busbw"] = Counter(size * bus_factor(c, n), Counter::kIsIterationInvariantRate);
  state.counters["ranks"] = n;
}

void register_all() {
  const std::pair<const char*, Collective> kinds[] = {
      {"BM_AllReduce", Collective::all_reduce},
      {"BM_ReduceScatter", Collective::reduce_scatter},
      {"BM_AllGather", Collective::all_gather}};
  for (const auto& [name, c] : kinds) {
    for (int64_t bytes = 1024; bytes <= (int64_t(64) << 20); bytes *= 4) {
      benchmark::RegisterBenchmark(name, [c = c](benchmark::State& s) { run(s, c); })
          ->Arg(bytes)
          ->Iterations(iterations_for(bytes))
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  tessera::parallel::MpiSession session(&argc, &argv);
  tessera::set_num_threads(1);  // one rank per core; the copies are memory-bound
  tessera::bench::initialize(&argc, argv);
  tessera::bench::register_all();
  const std::string header =
      "collectives over MPI: " + std::to_string(tessera::bench::world().size()) +
      " ranks; algbw = bytes / time, busbw = algbw x 2(n-1)/n (all-reduce) or (n-1)/n "
      "(reduce-scatter, all-gather)";
  tessera::bench::run_on_all_ranks(header.c_str());
  benchmark::Shutdown();
  return 0;
}

#else

int main() {
  std::printf("bench_collectives: Tessera was built without MPI (TESSERA_WITH_MPI=OFF)\n");
  return 0;
}

#endif
