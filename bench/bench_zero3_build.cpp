// Building one ZeRO-3 rank's parameters for GPT-2 small (124M, fp32) at data-parallel size dp,
// two ways that give the same shard, bit for bit (FlatParamsN1.DeferredWeightsFillOnlyThisRanks-
// Shard):
//  - whole:    the model built with every weight drawn and held, then the rank's shard copied
//              into the flat buffers (how ParallelTrainer built before): every rank draws all
//              124M elements and holds 4 bytes each for a moment, whatever dp is;
//  - deferred: the weights built without memory (nn::ModelParallel::defer_parameters) and the
//              rank's shard filled from their fills (FlatParams): 124M / dp elements drawn,
//              4 / dp bytes held, plus the norm gains and biases built as usual.
// The work is one Philox draw and Box-Muller transform per element drawn, so the deferred build
// should cost about 1/dp of the whole one.
//
// Counters: `drawn` is the elements the rank drew; `peak_MB` the most host memory the build
// held above what it started with; `kept_MB` what the built rank keeps (its shards).

#include "bench/counters.h"
#include "tessera/nn/gpt.h"
#include "tessera/parallel/data/flat_params.h"

namespace tessera::bench {
namespace {

using parallel::FlatLayout;
using parallel::FlatParams;

void BM_Zero3Build(benchmark::State& state) {
  const int dp = int(state.range(0));
  const bool deferred = state.range(1) != 0;
  const nn::GPTConfig config = nn::GPTConfig::preset("gpt2-d12");
  Allocator& host = allocator_for(Device::cpu());
  int64_t peak = 0, kept = 0, drawn = 0;
  for (auto _ : state) {
    const int64_t before = host.stats().live_bytes;
    host.reset_peak();
    nn::ModelParallel mp;
    mp.defer_parameters = deferred;
    const nn::GPT gpt(config, DType::f32, mp);
    parallel::LayoutOptions o;
    o.dp_size = dp;
    o.units = parallel::gpt_units(gpt.named_parameters());
    const FlatLayout layout(gpt.named_parameters(), o);
    const FlatParams flat(layout, 0, /*sharded=*/true, nullptr,
                          [&](const std::string& name) { return gpt.param_fill(name); });
    peak = host.stats().peak_bytes - before;
    kept = host.stats().live_bytes - before;
    drawn = 0;
    if (!deferred)
      for (const auto& [name, p] : gpt.named_parameters()) drawn += p.dim() == 2 ? p.numel() : 0;
    else
      for (size_t b = 0; b < layout.buckets().size(); ++b)
        for (const parallel::Segment& s : layout.shard_segments(int(b), 0))
          drawn += layout.params()[size_t(s.param)].tensor.dim() == 2 ? s.length : 0;
  }
  state.counters["drawn"] = double(drawn);
  state.counters["peak_MB"] = double(peak) / 1e6;
  state.counters["kept_MB"] = double(kept) / 1e6;
}

BENCHMARK(BM_Zero3Build)
    ->ArgNames({"dp", "deferred"})
    ->ArgsProduct({{1, 8, 64}, {0, 1}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(2);

}  // namespace
}  // namespace tessera::bench
