// Gradient compression per setting: bytes each rank sends per training step and the step time,
// next to the same layout uncompressed, measured in the same process.
//
// Model: bench_layouts' GPT-2 style model (8 layers, width 256, 8 heads, vocabulary 4096, 64
// positions, 7.4M parameters), B=16 sequences of T=64 tokens, AdamW at a constant lr 3e-4,
// clipping at 1.0; dp = the MPI world size (2 or 4), ZeRO 0 and 1, compression none, bf16 and
// powersgd:1, 4 and 16 (PowerSGD after no warm-up: every timed step compresses).
//
// Run under MPI:  OMP_NUM_THREADS=1 mpiexec -n 2 build/bench/bench_compression
//
// Per setting, the slowest rank's step time (1 untimed step first) and the counters:
//   wire_MiB      what the busiest rank sent per step, as a ring sends it (comm/traffic.h): the
//                 gradient reduction, ZeRO-1's parameter all-gather, and the scalars (norm,
//                 loss, target count), so compression's share of a step's traffic shows
//   bytes_vs_none this setting's wire bytes over the uncompressed run's at the same stage
//   vs_none       the uncompressed run's step time over this one's (> 1: faster)
//   comm_ms       the most time any rank spent blocked in communication per step
//   loss          the last step's: compression changes the updates, so it drifts from none's
// On one machine the ranks share memory bandwidth, not a network: the step times show the
// compute PowerSGD adds (two skinny GEMMs per matrix and a host Gram-Schmidt), not the
// network time it saves; the bytes are what a network would carry.

#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>

#include "tessera/tessera.h"

#if TESSERA_HAS_MPI
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "bench/mpi_bench.h"
#include "bench/trainer_bench.h"

namespace tessera::bench {
namespace {

constexpr int64_t kSteps = 3;

struct Setting {
  int zero = 0;
  std::string compression;  // parse_grad_compression's spelling
  std::string name() const { return "zero" + std::to_string(zero) + "/" + compression; }
};

parallel::ParallelConfig config_of(const Setting& s, int dp) {
  parallel::ParallelConfig p = bench_config({dp, 1, 1});
  p.zero_stage = s.zero;
  p.grad_compression = parallel::parse_grad_compression(s.compression, "bench_compression");
  return p;
}

// The uncompressed run of each stage: its seconds and wire bytes per step.
struct Reference {
  double seconds = 0, wire_bytes = 0;
};
std::map<int, Reference>& references() {
  static std::map<int, Reference> r;
  return r;
}

constexpr double kMiB = 1024.0 * 1024.0;

void run(benchmark::State& state, const Setting& setting) {
  auto comm = parallel::MpiCommunicator::world();
  parallel::ParallelTrainer trainer(comm, bench_model(), config_of(setting, comm->size()));
  const Batch& batch = global_batch();
  parallel::ParallelStepStats stats;
  auto step = [&] { stats = trainer.step(batch.inputs, batch.targets); };
  step();  // untimed: the allocator's cache, AdamW's moments, PowerSGD's buffers
  double seconds = 0, comm_seconds = 0, wire = 0;
  for (auto _ : state) {
    const double s = slowest_seconds(step);
    state.SetIterationTime(s);
    seconds += s;
    comm_seconds += max_over_ranks(stats.comm_seconds);
    wire += max_over_ranks(double(stats.comm_wire_bytes));
  }
  const double steps = double(state.iterations());
  seconds /= steps;
  wire /= steps;
  if (setting.compression == "none") references()[setting.zero] = {seconds, wire};
  state.counters["wire_MiB"] = wire / kMiB;
  if (auto it = references().find(setting.zero); it != references().end()) {
    state.counters["bytes_vs_none"] = wire / it->second.wire_bytes;
    state.counters["vs_none"] = it->second.seconds / seconds;
  }
  state.counters["comm_ms"] = 1e3 * comm_seconds / steps;
  state.counters["loss"] = max_over_ranks(stats.loss);
}

void register_all() {
  for (int zero : {0, 1})
    for (const char* c : {"none", "bf16", "powersgd:1", "powersgd:4", "powersgd:16"}) {
      const Setting s{zero, c};
      benchmark::RegisterBenchmark(("BM_Compression/" + s.name()).c_str(),
                                   [s](benchmark::State& state) { run(state, s); })
          ->Iterations(kSteps)
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
}

std::string header(int n) {
  const nn::GPTConfig c = bench_model();
  char line[512];
  std::snprintf(line, sizeof(line),
                "gradient compression: dp%d on %u cores; GPT-2 style L=%lld C=%lld vocab=%lld, "
                "%lld parameters (%.1f MiB of fp32 gradients); B=%lld T=%lld",
                n, std::thread::hardware_concurrency(), static_cast<long long>(c.n_layer),
                static_cast<long long>(c.n_embd), static_cast<long long>(c.vocab_size),
                static_cast<long long>(nn::GPT(c).num_parameters()),
                double(nn::GPT(c).num_parameters()) * 4 / kMiB, static_cast<long long>(kBatch),
                static_cast<long long>(kSeq));
  return line;
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  tessera::parallel::MpiSession session(&argc, &argv);
  tessera::set_num_threads(1);
  tessera::bench::initialize(&argc, argv);
  const int n = tessera::bench::world().size();
  if (n < 2) {
    if (tessera::bench::world().rank() == 0)
      std::printf("bench_compression: run under mpiexec -n 2 (or 4): compression needs dp > 1\n");
    return 0;
  }
  tessera::bench::register_all();
  tessera::bench::run_on_all_ranks(tessera::bench::header(n).c_str());
  benchmark::Shutdown();
  return 0;
}

#else

int main() {
  std::printf("bench_compression: Tessera was built without MPI (TESSERA_WITH_MPI=OFF)\n");
  return 0;
}

#endif
