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
// Each size runs twice, on the same buffers: first plain MPI (BM_Mpi*: the blocking
// MPI_Allreduce, MPI_Reduce_scatter_block and MPI_Allgather, a few lines here), then the
// Communicator; the Communicator's row carries vs_mpi, its time over plain MPI's measured just
// before in the same run. The Communicator's all-reduce of floats is a reduce-scatter then an
// all-gather above 8 KiB, one all-to-all round below, summed in rank order either way (so every
// rank receives the same bits), which plain MPI's one call is not bound to.
//
// Run under MPI:  mpiexec -n 2 build/bench/bench_collectives
// The wait mode (spin or yield, CommOptions::wait) is printed in the header; compare it with
// TESSERA_COMM_WAIT=yield to see what sleeping between polls costs.
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
#include <map>
#include <string>
#include <utility>

#include "tessera/tessera.h"

#if TESSERA_HAS_MPI
#include "bench/mpi_bench.h"

namespace tessera::bench {
namespace {

enum class Collective { all_reduce, reduce_scatter, all_gather };

// Plain MPI's seconds per call, by (collective, bytes): set by the BM_Mpi* row, read by the
// Communicator's row that follows it.
std::map<std::pair<Collective, int64_t>, double>& mpi_seconds() {
  static std::map<std::pair<Collective, int64_t>, double> m;
  return m;
}

double bus_factor(Collective c, int n) {
  return c == Collective::all_reduce ? 2.0 * (n - 1) / n : double(n - 1) / n;
}

// Enough iterations for a stable figure at small sizes, few at large ones; the same on every
// rank because it depends on the size only.
int64_t iterations_for(int64_t bytes) {
  return std::clamp<int64_t>((int64_t(256) << 20) / bytes, 5, 2000);
}

void run(benchmark::State& state, Collective c, bool plain_mpi) {
  parallel::MpiCommunicator& comm = world();
  const int n = comm.size();
  // Whole-buffer elements, rounded to a multiple of n so the chunks are equal.
  const int64_t bytes = state.range(0);
  const int64_t count = std::max<int64_t>(bytes / 4 / n, 1) * n;
  Tensor whole = full(Shape{count}, 1.0), part = full(Shape{count / n}, 1.0);
  MPI_Comm mc = comm.comm();
  auto once_mpi = [&] {
    switch (c) {
      case Collective::all_reduce:
        MPI_Allreduce(MPI_IN_PLACE, whole.data_ptr(), int(count), MPI_FLOAT, MPI_SUM, mc);
        break;
      case Collective::reduce_scatter:
        MPI_Reduce_scatter_block(whole.data_ptr(), part.data_ptr(), int(count / n), MPI_FLOAT,
                                 MPI_SUM, mc);
        break;
      case Collective::all_gather:
        MPI_Allgather(part.data_ptr(), int(count / n), MPI_FLOAT, whole.data_ptr(), int(count / n),
                      MPI_FLOAT, mc);
        break;
    }
  };
  auto once_tessera = [&] {
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
  auto once = [&] { plain_mpi ? once_mpi() : once_tessera(); };
  once();  // warm-up: the allocator's cache and MPI's connections
  double total = 0;
  for (auto _ : state) {
    const double t = slowest_seconds(once);
    total += t;
    state.SetIterationTime(t);
  }
  const double per_call = total / double(state.iterations());
  const auto key = std::make_pair(c, bytes);
  if (plain_mpi)
    mpi_seconds()[key] = per_call;
  else if (mpi_seconds().count(key))
    state.counters["vs_mpi"] = per_call / mpi_seconds()[key];
  // Rates over the manual (slowest-rank) time: "busbw=1.2G/s" is 1.2 GB/s.
  const double size = double(count) * 4.0;
  using benchmark::Counter;
  state.counters["bytes"] = Counter(size, Counter::kDefaults, Counter::kIs1024);
  state.counters["algbw"] = Counter(size, Counter::kIsIterationInvariantRate);
  state.counters["busbw"] = Counter(size * bus_factor(c, n), Counter::kIsIterationInvariantRate);
  state.counters["ranks"] = n;
}

void register_all() {
  const std::pair<const char*, Collective> kinds[] = {{"AllReduce", Collective::all_reduce},
                                                      {"ReduceScatter", Collective::reduce_scatter},
                                                      {"AllGather", Collective::all_gather}};
  for (const auto& [name, c] : kinds) {
    for (int64_t bytes = 1024; bytes <= (int64_t(64) << 20); bytes *= 4) {
      for (bool plain : {true, false}) {
        const std::string row = std::string(plain ? "BM_Mpi" : "BM_") + name;
        benchmark::RegisterBenchmark(row.c_str(),
                                     [c = c, plain](benchmark::State& s) { run(s, c, plain); })
            ->Arg(bytes)
            ->Iterations(iterations_for(bytes))
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
      }
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
      " ranks, wait mode " +
      tessera::parallel::comm_wait_name(tessera::bench::world().options().wait) + ";" +
      " algbw = bytes / time, busbw = algbw x 2(n-1)/n (all-reduce) or (n-1)/n "
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
