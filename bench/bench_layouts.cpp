// Trainer throughput per layout: training steps of one small GPT through ParallelTrainer under
// every dp x pp x tp layout that fits the world size, next to the single-process baseline
// measured in the same process.
//
// Model: GPT-2 style (LayerNorm, GELU, learned positions, tied head), 8 layers, width 256,
// 8 heads, vocabulary 4096, 64 positions; global batch B=16 sequences of T=64 tokens, AdamW at
// a constant lr 3e-4, clipping at 1.0. About 7.4M parameters: big enough that matmuls dominate
// a step, small enough for a 2-core machine.
//
// Run under MPI:  OMP_NUM_THREADS=1 mpiexec -n 4 build/bench/bench_layouts
//   n=1: the baseline only; n=2: dp2 (ZeRO 0, 3), tp2, pp2 (GPipe, 1F1B; m 4, 8);
//   n=4: dp2.tp2 and dp2.pp2 (ZeRO 0, 3), tp2.pp2, pp4 (1F1B, interleaved v=2; m 4, 8);
//   any other n: the baseline only.
// The baseline (`single`) runs on rank 0 alone, over a one-rank communicator split from the
// world, while the other ranks wait in a barrier that polls once a millisecond (mpi_bench.h's
// idle_barrier), so that they leave the cores to it: waiting in the communicator instead, whose
// polling is faster, made the baseline's steps about 30% slower at -n 4 than at -n 1.
//
// Per layout, the slowest rank's step time (bench/mpi_bench.h; 1 untimed step first fills the
// allocator's cache and creates AdamW's moments) and the counters:
//   tokens/s       B*T per step over that time
//   FLOPs, FLOPS   nanoGPT's estimate, 6*N + 12*L*C*T per token (bench_train_step.cpp)
//   vs_single      the baseline's median step time over this layout's: the speedup
//   comm_ms        the most time any rank spent blocked in communication per step
//   bubble         the pipeline's measured idle / busy (pipeline/executor.h), worst pp group
//   bubble_ideal   (p - 1) / (v * m), the schedule simulator's ideal
//   *_MiB          the largest rank's bytes of parameters (ZeRO-3: the shard; params_peak
//                  while units are gathered), gradients, optimizer state and activations
//   loss           the last step's: every layout trains the same model on the same batch, so
//                  it agrees across layouts to rounding
// Compute-bound: the matmuls of the model's linear layers.

#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>

#include "tessera/tessera.h"

#if TESSERA_HAS_MPI
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "bench/counters.h"
#include "bench/mpi_bench.h"
#include "bench/trainer_bench.h"

namespace tessera::bench {
namespace {

using parallel::MeshShape;
using parallel::ScheduleKind;

constexpr int64_t kSteps = 3;  // timed steps per run; --benchmark_repetitions repeats runs

struct Layout {
  std::string name;
  MeshShape mesh;
  int zero = 0;
  ScheduleKind schedule = ScheduleKind::one_f_one_b;
  int v = 1, m = 1;

  bool single() const { return mesh.world_size() == 1; }
  double ideal_bubble() const { return double(mesh.size("pp") - 1) / double(v * m); }
};

std::vector<Layout> layouts_for(int n) {
  constexpr auto gpipe = ScheduleKind::gpipe, f1b = ScheduleKind::one_f_one_b,
                 interleaved = ScheduleKind::interleaved;
  std::vector<Layout> out = {{"single", {1, 1, 1}}};
  if (n == 2) {
    out.insert(out.end(), {{"dp2_zero0", {2, 1, 1}, 0},
                           {"dp2_zero3", {2, 1, 1}, 3},
                           {"tp2", {1, 1, 2}},
                           {"pp2_gpipe_m4", {1, 2, 1}, 0, gpipe, 1, 4},
                           {"pp2_gpipe_m8", {1, 2, 1}, 0, gpipe, 1, 8},
                           {"pp2_1f1b_m4", {1, 2, 1}, 0, f1b, 1, 4},
                           {"pp2_1f1b_m8", {1, 2, 1}, 0, f1b, 1, 8}});
  } else if (n == 4) {
    out.insert(out.end(), {{"dp2.tp2_zero0", {2, 1, 2}, 0},
                           {"dp2.tp2_zero3", {2, 1, 2}, 3},
                           {"dp2.pp2_zero0_1f1b_m4", {2, 2, 1}, 0, f1b, 1, 4},
                           {"dp2.pp2_zero3_1f1b_m4", {2, 2, 1}, 3, f1b, 1, 4},
                           {"tp2.pp2_1f1b_m4", {1, 2, 2}, 0, f1b, 1, 4},
                           {"pp4_1f1b_m4", {1, 4, 1}, 0, f1b, 1, 4},
                           {"pp4_1f1b_m8", {1, 4, 1}, 0, f1b, 1, 8},
                           {"pp4_interleaved_v2_m4", {1, 4, 1}, 0, interleaved, 2, 4},
                           {"pp4_interleaved_v2_m8", {1, 4, 1}, 0, interleaved, 2, 8}});
  }
  return out;
}

parallel::ParallelConfig config_of(const Layout& layout) {
  parallel::ParallelConfig p = bench_config(layout.mesh);
  p.zero_stage = layout.zero;
  p.schedule = layout.schedule;
  p.virtual_stages = layout.v;
  p.microbatches = layout.m;
  return p;
}

// The parameter count and the per-step FLOPs (see the file comment); wpe does no
// multiply-adds, the tied wte does, as the head.
struct ModelWork {
  int64_t parameters = 0;
  double flops_per_step = 0;
};

const ModelWork& model_work() {
  static const ModelWork w = [] {
    const nn::GPTConfig c = bench_model();
    nn::GPT gpt(c);
    ModelWork out;
    out.parameters = gpt.num_parameters();
    const double n = double(out.parameters - c.block_size * c.n_embd);
    const double attention = 12.0 * double(c.n_layer * c.n_embd * kSeq);
    out.flops_per_step = double(kBatch * kSeq) * (6.0 * n + attention);
    return out;
  }();
  return w;
}

// Every step time of the baseline in this process; each layout's speedup is against their
// median.
std::vector<double>& baseline_seconds() {
  static std::vector<double> s;
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t k = v.size() / 2;
  return v.size() % 2 == 1 ? v[k] : 0.5 * (v[k - 1] + v[k]);
}

constexpr double kMiB = 1024.0 * 1024.0;

void run(benchmark::State& state, const Layout& layout) {
  const int rank = world().rank();
  // The baseline trains on rank 0 alone; every layout runs on the whole world.
  std::shared_ptr<parallel::Communicator> comm =
      layout.single() ? world().split(rank == 0 ? 0 : 1, rank, "single")
                      : parallel::MpiCommunicator::world();
  std::unique_ptr<parallel::ParallelTrainer> trainer;
  if (!layout.single() || rank == 0)
    trainer = std::make_unique<parallel::ParallelTrainer>(comm, bench_model(), config_of(layout));

  const Batch& batch = global_batch();
  parallel::ParallelStepStats stats;
  auto step = [&] {
    if (trainer) stats = trainer->step(batch.inputs, batch.targets);
  };
  step();  // untimed: the allocator's cache and AdamW's moments
  double seconds = 0, comm_seconds = 0, bubble = 0;
  for (auto _ : state) {
    double s = 0;
    if (layout.single()) {
      const auto t0 = std::chrono::steady_clock::now();
      step();
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      idle_barrier();
      s = max_over_ranks(s);
    } else {
      s = slowest_seconds(step);
    }
    state.SetIterationTime(s);
    seconds += s;
    comm_seconds += max_over_ranks(stats.comm_seconds);
    bubble += max_over_ranks(stats.bubble);
  }
  if (layout.single()) baseline_seconds().push_back(seconds / double(state.iterations()));

  const double steps = double(state.iterations());
  const ModelWork& work = model_work();
  using benchmark::Counter;
  report_flops(state, work.flops_per_step);
  state.counters["tokens/s"] = Counter(double(kBatch * kSeq), Counter::kIsIterationInvariantRate);
  if (!baseline_seconds().empty())
    state.counters["vs_single"] = median(baseline_seconds()) / (seconds / steps);
  state.counters["comm_ms"] = 1e3 * comm_seconds / steps;
  state.counters["bubble"] = bubble / steps;
  state.counters["bubble_ideal"] = layout.ideal_bubble();
  const parallel::RankMemory& m = stats.memory;
  state.counters["params_MiB"] = max_over_ranks(double(m.parameters)) / kMiB;
  state.counters["params_peak_MiB"] = max_over_ranks(double(m.parameters_peak)) / kMiB;
  state.counters["grads_MiB"] = max_over_ranks(double(m.gradients)) / kMiB;
  state.counters["optim_MiB"] = max_over_ranks(double(m.optimizer_state)) / kMiB;
  state.counters["act_MiB"] = max_over_ranks(double(m.activations)) / kMiB;
  state.counters["loss"] = max_over_ranks(stats.loss);
}

void register_all(int n) {
  for (const Layout& layout : layouts_for(n)) {
    benchmark::RegisterBenchmark(("BM_Layout/" + layout.name).c_str(),
                                 [layout](benchmark::State& s) { run(s, layout); })
        ->Iterations(kSteps)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
}

// OMP_NUM_THREADS if set, else 1: one rank per core.
int threads_per_rank() {
  const char* env = std::getenv("OMP_NUM_THREADS");
  const int n = env != nullptr ? std::atoi(env) : 0;
  return n > 0 ? n : 1;
}

std::string header(int n) {
  const nn::GPTConfig c = bench_model();
  const ModelWork& w = model_work();
  char line[512];
  std::snprintf(line, sizeof(line),
                "trainer throughput per layout: %d ranks x %d threads on %u cores; GPT-2 style "
                "L=%lld C=%lld heads=%lld vocab=%lld, %lld parameters; B=%lld T=%lld; "
                "%.2f GFLOP/step (6N + 12LCT per token)",
                n, threads_per_rank(), std::thread::hardware_concurrency(),
                static_cast<long long>(c.n_layer), static_cast<long long>(c.n_embd),
                static_cast<long long>(c.n_head), static_cast<long long>(c.vocab_size),
                static_cast<long long>(w.parameters), static_cast<long long>(kBatch),
                static_cast<long long>(kSeq), w.flops_per_step / 1e9);
  return line;
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  tessera::parallel::MpiSession session(&argc, &argv);
  tessera::set_num_threads(tessera::bench::threads_per_rank());
  tessera::bench::initialize(&argc, argv);
  const int n = tessera::bench::world().size();
  tessera::bench::register_all(n);
  tessera::bench::run_on_all_ranks(tessera::bench::header(n).c_str());
  benchmark::Shutdown();
  return 0;
}

#else

int main() {
  std::printf("bench_layouts: Tessera was built without MPI (TESSERA_WITH_MPI=OFF)\n");
  return 0;
}

#endif
