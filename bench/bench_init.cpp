// Building one tensor-parallel rank's weight: drawing the whole tensor and keeping the rank's
// slice (shard_of, the way layers built it before) against drawing only the slice
// (init_normal_shard). Both give the same bits (Init.AShardDrawsExactlyItsSliceOfTheWholeDraw);
// the work is the Philox draws and Box-Muller transforms, one per element drawn, so the slice
// should cost about 1/tp of the whole. GPT-2 small's MLP: c_fc [3072, 768] split by rows
// (column-parallel), c_proj [768, 3072] split by columns (row-parallel: one run per row).
//
// Counters: `drawn` is the elements drawn per rank; `Melem/s` the rate at which the rank's
// slice is produced.

#include "bench/counters.h"
#include "tessera/nn/init.h"

namespace tessera::bench {
namespace {

struct Geometry {
  Shape full;
  nn::ParamMeta meta;
};

Geometry geometry(int64_t split_cols) {
  nn::ParamMeta meta;
  meta.shard = split_cols ? nn::ShardKind::cols : nn::ShardKind::rows;
  return {split_cols ? Shape{768, 3072} : Shape{3072, 768}, meta};
}

const nn::InitSpec kSpec{nn::param_key(1337, "h.0.mlp.c_fc.weight"), 0.02};

void report(benchmark::State& state, const Shape& full, int tp, double drawn) {
  state.counters["drawn"] = drawn;
  state.counters["Melem/s"] = benchmark::Counter(double(full.numel()) / double(tp) / 1e6,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void BM_InitWholeThenShard(benchmark::State& state) {
  const int tp = int(state.range(0));
  const Geometry g = geometry(state.range(1));
  for (auto _ : state) {
    Tensor w = nn::shard_of(nn::init_normal(g.full, kSpec), g.meta, 0, tp, "w");
    benchmark::DoNotOptimize(w.data_ptr());
  }
  report(state, g.full, tp, double(g.full.numel()));
}

void BM_InitShard(benchmark::State& state) {
  const int tp = int(state.range(0));
  const Geometry g = geometry(state.range(1));
  for (auto _ : state) {
    Tensor w = nn::init_normal_shard(g.full, kSpec, g.meta, 0, tp, "w");
    benchmark::DoNotOptimize(w.data_ptr());
  }
  report(state, g.full, tp, double(g.full.numel()) / tp);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"tp", "split_cols"});
  for (int64_t cols : {0, 1})
    for (int64_t tp : {1, 2, 4, 8}) b->Args({tp, cols});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(BM_InitWholeThenShard)->Apply(shapes);
BENCHMARK(BM_InitShard)->Apply(shapes);

}  // namespace
}  // namespace tessera::bench
