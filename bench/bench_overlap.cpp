// Exposed communication at dp2: how much of a step's data-parallel communication the backward
// pass hides, with the reductions started from the gradient hooks (overlap on) against all of
// them started after backward (off), over bucket sizes, at ZeRO 0, 2 and 3 (with and without
// ZeRO-3's prefetch), measured in the same process.
//
// Model and batch: bench_layouts' (8 layers, width 256, 7.4M parameters; B=16, T=64).
// Run under MPI:  OMP_NUM_THREADS=1 mpiexec -n 2 build/bench/bench_overlap
//
// Counters, per setting (the slowest rank's step; 1 untimed step first):
//   exposed_ms  the most time any rank spent blocked waiting on communication per step
//               (TimedCommunicator: the phase timer of every wait), the communication the
//               step did not hide
//   vs_off      the same ZeRO stage and buckets with overlap off: its step time over this one
//   exposed_vs_off  this exposed_ms over overlap-off's
//   hidden      of the last step's bucket reductions on rank 0, the share seen complete before
//               backward handed over to finish(): reductions that ran while backward computed
//   buckets     the buckets of the layout
// After the table, rank 0's timeline of the last step at ZeRO-2 with one bucket per unit:
// when each bucket's reduce-scatter was launched and seen complete, against the end of
// backward; the direct view of collectives in flight while backward computes.
//
// On a 2-core machine two ranks already fill both cores, and MPI moves a collective only while
// a rank is inside an MPI call (here: the polls from the gradient hooks), so what overlap can
// hide is bounded by that; the timeline shows which reductions it hid. Quote speedups only
// where ranks <= cores.

#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>

#include "tessera/tessera.h"

#if TESSERA_HAS_MPI
#include <map>
#include <memory>
#include <thread>
#include <tuple>
#include <vector>

#include "bench/mpi_bench.h"
#include "bench/trainer_bench.h"

namespace tessera::bench {
namespace {

constexpr int64_t kSteps = 3;

struct Setting {
  int zero = 0;
  double bucket_mb = 0;  // 0: one bucket per unit
  bool overlap = true;
  bool prefetch = true;  // ZeRO-3
  std::string name() const {
    std::string n = "zero" + std::to_string(zero) + "/" +
                    (bucket_mb > 0 ? std::to_string(int(bucket_mb)) + "MiB" : "units") +
                    (overlap ? "/overlap" : "/after_backward");
    if (zero == 3) n += prefetch ? "/prefetch" : "/no_prefetch";
    return n;
  }
  std::tuple<int, double> reference() const { return {zero, bucket_mb}; }
};

std::vector<Setting> settings() {
  std::vector<Setting> out;
  for (int zero : {0, 2})
    for (double mb : {0.0, 1.0, 4.0})
      for (bool overlap : {false, true}) out.push_back({zero, mb, overlap, true});
  out.push_back({3, 0, false, false});
  out.push_back({3, 0, true, false});
  out.push_back({3, 0, true, true});
  return out;
}

parallel::ParallelConfig config_of(const Setting& s, int dp) {
  parallel::ParallelConfig p = bench_config({dp, 1, 1});
  p.zero_stage = s.zero;
  p.bucket_mb = s.bucket_mb;
  p.overlap = s.overlap;
  p.zero3_prefetch = s.prefetch;
  return p;
}

struct Reference {
  double seconds = 0, exposed = 0;
};
std::map<std::tuple<int, double>, Reference>& references() {
  static std::map<std::tuple<int, double>, Reference> r;
  return r;
}

parallel::ReduceTimeline& shown_timeline() {
  static parallel::ReduceTimeline t;
  return t;
}

void run(benchmark::State& state, const Setting& setting) {
  auto comm = parallel::MpiCommunicator::world();
  parallel::ParallelTrainer trainer(comm, bench_model(), config_of(setting, comm->size()));
  const Batch& batch = global_batch();
  parallel::ParallelStepStats stats;
  auto step = [&] { stats = trainer.step(batch.inputs, batch.targets); };
  step();
  double seconds = 0, exposed = 0;
  for (auto _ : state) {
    const double s = slowest_seconds(step);
    state.SetIterationTime(s);
    seconds += s;
    exposed += max_over_ranks(stats.comm_seconds);
  }
  const double steps = double(state.iterations());
  seconds /= steps;
  exposed /= steps;
  if (!setting.overlap) references()[setting.reference()] = {seconds, exposed};
  const parallel::ReduceTimeline& t = trainer.data_parallel().reducer().timeline();
  int hidden = 0;
  for (const auto& e : t.events) hidden += e.completed > 0 && e.completed <= t.finish_start;
  state.counters["exposed_ms"] = 1e3 * exposed;
  state.counters["hidden"] = t.events.empty() ? 0.0 : double(hidden) / double(t.events.size());
  state.counters["buckets"] = double(trainer.data_parallel().layout().buckets().size());
  if (auto it = references().find(setting.reference()); it != references().end()) {
    state.counters["vs_off"] = it->second.seconds / seconds;
    state.counters["exposed_vs_off"] = exposed / it->second.exposed;
  }
  if (setting.zero == 2 && setting.bucket_mb == 0 && setting.overlap) shown_timeline() = t;
}

void print_timeline() {
  const parallel::ReduceTimeline& t = shown_timeline();
  if (world().rank() != 0 || t.events.empty()) return;
  std::printf("\nrank 0, last step, zero2/units/overlap: ms from the first gradient\n");
  std::printf("  bucket  launched  completed  %s\n", "(backward ends at finish_start)");
  for (const auto& e : t.events)
    std::printf("  %6d  %8.2f  %9.2f  %s\n", e.bucket, 1e3 * e.launched, 1e3 * e.completed,
                e.completed <= t.finish_start ? "in flight during backward, done before it ended"
                                              : "waited for in finish()");
  std::printf("  finish_start %.2f ms, finish_end %.2f ms\n", 1e3 * t.finish_start,
              1e3 * t.finish_end);
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  tessera::parallel::MpiSession session(&argc, &argv);
  tessera::set_num_threads(1);
  tessera::bench::initialize(&argc, argv);
  const int n = tessera::bench::world().size();
  if (n != 2) {
    if (tessera::bench::world().rank() == 0)
      std::printf("bench_overlap: run under mpiexec -n 2 (dp2)\n");
    return 0;
  }
  for (const auto& s : tessera::bench::settings())
    benchmark::RegisterBenchmark(("BM_Overlap/" + s.name()).c_str(),
                                 [s](benchmark::State& state) { tessera::bench::run(state, s); })
        ->Iterations(tessera::bench::kSteps)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  char header[256];
  std::snprintf(header, sizeof(header),
                "exposed communication at dp2 on %u cores; GPT-2 style L=8 C=256 vocab=4096, "
                "B=16 T=64",
                std::thread::hardware_concurrency());
  tessera::bench::run_on_all_ranks(header);
  tessera::bench::print_timeline();
  benchmark::Shutdown();
  return 0;
}

#else

int main() {
  std::printf("bench_overlap: Tessera was built without MPI (TESSERA_WITH_MPI=OFF)\n");
  return 0;
}

#endif
