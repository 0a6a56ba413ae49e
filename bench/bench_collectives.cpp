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
// Google Benchmark runs in every rank. Its adaptive iteration count would let ranks disagree
// on how many collectives to issue (and hang), so each size runs a fixed count, computed from
// the size alone. An iteration's time is the slowest rank's (a collective is done when the
// last rank is), fed to GB as manual time. Only rank 0 prints.
//
// Memory-bound: over MPI's shared-memory transport the ceiling is the machine's copy
// bandwidth divided by the copies each algorithm makes; with more ranks than cores the ranks
// also wait for each other's time slices, which the figures include.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "tessera/tessera.h"

#if TESSERA_HAS_MPI
#include "tessera/parallel/comm/mpi_communicator.h"

namespace tessera::bench {
namespace {

enum class Collective { all_reduce, reduce_scatter, all_gather };

parallel::Communicator& world() {
  static std::shared_ptr<parallel::Communicator> w = parallel::MpiCommunicator::world();
  return *w;
}

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
  Tensor slowest = zeros(Shape{1}, DType::f64);
  for (auto _ : state) {
    comm.barrier();
    auto t0 = std::chrono::steady_clock::now();
    once();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ops::fill_(slowest, s);
    comm.all_reduce(slowest, parallel::CommOp::max);
    s = slowest.item<double>();
    state.SetIterationTime(s);
  }
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

// Ranks other than 0 run the same benchmarks silently.
class SilentReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  tessera::parallel::MpiSession session(&argc, &argv);
  tessera::set_num_threads(1);  // one rank per core; the copies are memory-bound
  benchmark::Initialize(&argc, argv);
  tessera::bench::register_all();
  if (tessera::bench::world().rank() == 0) {
    std::printf(
        "collectives over MPI: %d ranks; algbw = bytes / time, busbw = algbw x 2(n-1)/n "
        "(all-reduce) or (n-1)/n (reduce-scatter, all-gather)\n",
        tessera::bench::world().size());
    benchmark::RunSpecifiedBenchmarks();
  } else {
    tessera::bench::SilentReporter silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  benchmark::Shutdown();
  return 0;
}

#else

int main() {
  std::printf("bench_collectives: Tessera was built without MPI (TESSERA_WITH_MPI=OFF)\n");
  return 0;
}

#endif
