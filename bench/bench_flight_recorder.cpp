// What the flight recorder (parallel/comm/flight_recorder.h) costs: every communicator call
// writes one record and moves it twice (started, completed), under a mutex, with one Work
// wrapper allocated. Measured three ways, each against the recorder turned off
// (CommOptions::record_flight = false) in the same run:
//   BM_FlightRecord               the record alone: record + two marks, one thread (ns/call)
//   BM_FlightAllReduce/{off,on}   a 1 KiB all-reduce over the world, the cheapest collective a
//                                 training step makes: the recorder's largest share of a call
//   BM_FlightStep/{off,on}        a dp2 training step of bench/trainer_bench.h's 7.4M-parameter
//                                 GPT (ZeRO 0, per-layer buckets): the share of a step, with
//                                 calls_per_step the records one step writes on a rank
// Run under MPI:  OMP_NUM_THREADS=1 mpiexec -n 2 build/bench/bench_flight_recorder
//                 --benchmark_repetitions=5
// The step's share is below the run-to-run spread of a 2-core machine; the per-call figures
// times calls_per_step bound it: (on - off) ns x calls / step time.

#include <benchmark/benchmark.h>

#include <cstdio>

#include "tessera/parallel/comm/flight_recorder.h"
#include "tessera/tessera.h"

namespace {

void BM_FlightRecord(benchmark::State& state) {
  tessera::parallel::FlightRecorder r(0);
  const int g = r.add_group({"dp", "world/dp:0", 2, 0});
  for (auto _ : state) {
    const uint64_t id = r.record(g, "all_reduce", "sum", 4096, "f32", -1, 1);
    r.mark(id, tessera::parallel::FlightState::started);
    r.mark(id, tessera::parallel::FlightState::completed);
  }
  state.SetItemsProcessed(int64_t(state.iterations()));
}
BENCHMARK(BM_FlightRecord);

}  // namespace

#if TESSERA_HAS_MPI
#include <chrono>
#include <memory>
#include <string>

#include "bench/mpi_bench.h"
#include "bench/trainer_bench.h"

namespace tessera::bench {
namespace {

std::shared_ptr<parallel::MpiCommunicator> world_recording(bool on) {
  parallel::CommOptions o;
  o.record_flight = on;
  return parallel::MpiCommunicator::world(o);
}

void all_reduce(benchmark::State& state, bool on) {
  auto comm = world_recording(on);
  Tensor x = ones({256});  // 1 KiB
  constexpr int kCalls = 2000;
  for (auto _ : state) {
    state.SetIterationTime(slowest_seconds([&] {
      for (int i = 0; i < kCalls; ++i) comm->all_reduce(x);
    }) / kCalls);
  }
  state.counters["bytes"] = 1024;
}

void step(benchmark::State& state, bool on) {
  auto comm = world_recording(on);
  parallel::ParallelConfig config = bench_config({comm->size(), 1, 1});
  parallel::ParallelTrainer trainer(comm, bench_model(), config);
  const Batch& batch = global_batch();
  trainer.step(batch.inputs, batch.targets);  // untimed: the allocator's cache, AdamW's moments
  // The last record's id counts every call so far (records() copies the ring: outside the loop).
  auto calls_so_far = [&] {
    const std::vector<parallel::FlightRecord> r = comm->flight_recorder()->records();
    return r.empty() ? uint64_t(0) : r.back().id;
  };
  const uint64_t before = calls_so_far();
  int64_t steps = 0;
  for (auto _ : state) {
    state.SetIterationTime(slowest_seconds([&] { trainer.step(batch.inputs, batch.targets); }));
    ++steps;
  }
  const uint64_t after = calls_so_far();
  // (The timing's barrier and all-reduce run on mpi_bench's world, whose recorder is another.)
  state.counters["calls_per_step"] = on ? double(after - before) / double(steps) : 0.0;
}

void register_all() {
  for (bool on : {false, true}) {
    const std::string mode = on ? "on" : "off";
    benchmark::RegisterBenchmark(("BM_FlightAllReduce/" + mode).c_str(),
                                 [on](benchmark::State& s) { all_reduce(s, on); })
        ->Iterations(5)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("BM_FlightStep/" + mode).c_str(),
                                 [on](benchmark::State& s) { step(s, on); })
        ->Iterations(5)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  tessera::parallel::MpiSession session(&argc, &argv);
  tessera::set_num_threads(1);
  tessera::bench::initialize(&argc, argv);
  tessera::bench::register_all();
  char header[160];
  std::snprintf(header, sizeof header,
                "flight recorder cost: %d ranks; the recorder off (the reference) and on",
                tessera::bench::world().size());
  tessera::bench::run_on_all_ranks(header);
  benchmark::Shutdown();
  return 0;
}

#else

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

#endif
