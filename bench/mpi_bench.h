#pragma once
// Google Benchmark under mpiexec, shared by the MPI benchmarks (bench_collectives,
// bench_layouts).
//
// GB runs in every rank. Its adaptive iteration count would let ranks disagree on how many
// collective calls to issue (and hang), so every benchmark registered here must set a fixed
// iteration count that depends on its arguments alone. An iteration's time is the slowest
// rank's (collective work is done when the last rank is), fed to GB as manual time; only
// rank 0 prints.

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "tessera/parallel/comm/mpi_communicator.h"
#include "tessera/tessera.h"

namespace tessera::bench {

inline parallel::MpiCommunicator& world() {
  static std::shared_ptr<parallel::MpiCommunicator> w = parallel::MpiCommunicator::world();
  return *w;
}

// The largest of every rank's `value`. Collective over world.
inline double max_over_ranks(double value) {
  Tensor t = full(Shape{1}, value, DType::f64);
  world().all_reduce(t, parallel::CommOp::max);
  return t.item<double>();
}

// Runs `body` on every rank between a barrier and its end; returns the slowest rank's seconds.
template <class F>
double slowest_seconds(F&& body) {
  world().barrier();
  const auto t0 = std::chrono::steady_clock::now();
  body();
  return max_over_ranks(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// A barrier over world that checks for completion once a millisecond. For ranks that sit out
// a benchmark's work: the communicator's waits (and MPI's) poll far more often, and on an
// oversubscribed machine that polling takes time slices from the ranks at work.
inline void idle_barrier() {
  MPI_Request request;
  MPI_Ibarrier(world().comm(), &request);
  int done = 0;
  for (MPI_Test(&request, &done, MPI_STATUS_IGNORE); done == 0;
       MPI_Test(&request, &done, MPI_STATUS_IGNORE))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// Ranks other than 0 run the same benchmarks silently.
class SilentReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

// benchmark::Initialize, with --benchmark_out and --benchmark_out_format left to rank 0: every
// rank would otherwise open (and truncate) the same output file.
inline void initialize(int* argc, char** argv) {
  if (world().rank() != 0) {
    int kept = 1;
    for (int i = 1; i < *argc; ++i)
      if (std::strncmp(argv[i], "--benchmark_out", 15) != 0) argv[kept++] = argv[i];
    *argc = kept;
    argv[kept] = nullptr;
  }
  benchmark::Initialize(argc, argv);
}

// Runs the registered benchmarks on every rank, printing `header` and the results on rank 0.
inline void run_on_all_ranks(const char* header) {
  if (world().rank() == 0) {
    std::printf("%s\n", header);
    benchmark::RunSpecifiedBenchmarks();
  } else {
    SilentReporter silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
}

}  // namespace tessera::bench
