#include "tessera/plan/planner.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "tessera/core/error.h"
#include "tessera/plan/detail/text.h"

namespace tessera::plan {

Cluster Cluster::of(const GpuSpec& gpu, int gpus) {
  Cluster c;
  c.gpu = gpu;
  c.gpus = gpus;
  c.usd_per_hour = gpu.usd_per_hour;
  return c;
}

namespace {

std::vector<int> divisors(int64_t n) {
  std::vector<int> out;
  for (int64_t d = 1; d * d <= n; ++d)
    if (n % d == 0) {
      out.push_back(int(d));
      if (d * d != n) out.push_back(int(n / d));
    }
  std::sort(out.begin(), out.end());
  return out;
}

void check_request(const PlanRequest& r) {
  r.workload.validate();
  TESSERA_CHECK(!r.clusters.empty(), "plan: no cluster to plan for");
  TESSERA_CHECK(std::isfinite(r.memory.reserve_gb) && r.memory.reserve_gb >= 0,
                "plan: the memory reserve must be >= 0 GB, got ", r.memory.reserve_gb);
  for (const Cluster& c : r.clusters) {
    c.gpu.validate();
    TESSERA_CHECK(c.gpus >= 1 && c.gpus <= (1 << 20), "plan: the number of GPUs must be in [1, ",
                  1 << 20, "], got ", c.gpus);
    detail::check_in_range(c.usd_per_hour, 0, kMaxUsdPerGpuHour, "plan: the price per GPU-hour",
                           "USD");
    TESSERA_CHECK(r.memory.reserve_gb < c.gpu.memory_gb, "plan: the memory reserve of ",
                  r.memory.reserve_gb, " GB is not less than the ", c.gpu.name, "'s ",
                  c.gpu.memory_gb, " GB");
  }
  const SearchSpace& s = r.space;
  TESSERA_CHECK(!s.recompute.empty(), "plan: no recomputation mode to try");
  TESSERA_CHECK(s.zero >= -1 && s.zero <= 3, "plan: ZeRO stage must be 0-3, got ", s.zero);
  TESSERA_CHECK(r.usable_fraction > 0 && r.usable_fraction <= 1,
                "plan: the usable share of GPU memory must be in (0, 1], got ", r.usable_fraction);
}

double rank_key(const Candidate& c, const PlanRequest& r) {
  const double usd = r.clusters[size_t(c.cluster)].usd_per_hour;
  return r.rank_by == RankBy::cost ? c.time.step_s * c.layout.gpus() * usd : c.time.step_s;
}

// The memory model's 64-bit byte counts hold any layout up to this; no GPU holds a
// thousandth of it (the table's largest is 10^5 GB).
constexpr double kBeyondAnyGpu = 0x1p62;

// An upper bound, in double, of the largest product estimate_memory forms: a micro-batch's
// tokens, times the chunks in flight, times 128 bytes, times the widths a token has on this
// rank: its blocks' widest tensor (the model, the MLP, q k v, or the attention scores when they
// are materialized) for each of its layers, and the head's logits. A block saves at most 14
// values of its widest width a token, of at most 4 bytes, and its statistics: under 64 bytes;
// 128 leaves room. Below kBeyondAnyGpu no sum overflows.
double byte_count_bound(const Workload& w, const Layout& l, const MemoryOptions& options) {
  const nn::GPTConfig& m = w.model;
  const double tokens = double(l.micro_batch(w)) * double(w.seq_len);
  double block = std::max({double(m.n_embd), double(m.ffn_dim()),
                           double(m.n_head + 2 * m.n_kv_head) * double(m.head_dim())});
  if (options.materialized_attention) block += double(m.n_head) * double(w.seq_len);
  const double widths = block * double(m.n_layer) / l.pp + double(m.vocab_size) + m.n_embd;
  const double in_flight = double(l.microbatches) * l.virtual_stages;
  return 128 * tokens * widths * in_flight;
}

// The sizes a search was held to, "tp 16, dp 3": when nothing is valid they may be why, and
// the message said only that the model and GPU count admit no split.
std::string pinned_sizes(const SearchSpace& s) {
  std::string out;
  auto add = [&](const char* name, int value, bool held) {
    if (held) out += str_cat(out.empty() ? "" : ", ", name, " ", value);
  };
  add("tp", s.tp, s.tp > 0);
  add("pp", s.pp, s.pp > 0);
  add("dp", s.dp, s.dp > 0);
  add("virtual stages", s.virtual_stages, s.virtual_stages > 0);
  add("micro-batch", s.micro_batch, s.micro_batch > 0);
  add("ZeRO", s.zero, s.zero >= 0);
  return out;
}

}  // namespace

Candidate evaluate(const Workload& w, const Layout& l, const Cluster& cluster, int index,
                   const PlanRequest& r) {
  Candidate c;
  c.cluster = index;
  c.layout = l;
  MemoryOptions memory = r.memory;
  memory.materialized_attention = r.engine.materialized_attention;
  memory.outputs_held_until_backward = r.engine.outputs_held_until_backward;
  c.capacity_bytes = cluster.gpu.memory_gb * 1e9;
  c.usable_bytes = c.capacity_bytes * r.usable_fraction;
  if (byte_count_bound(w, l, memory) < kBeyondAnyGpu) {
    c.memory = estimate_memory(w, l, memory);
    c.fits = double(c.memory.total()) <= c.usable_bytes;
  } else {
    // Not estimated: its activations alone could pass 2^62 bytes, so it fits nowhere.
    c.memory.activations = int64_t(kBeyondAnyGpu);
    c.fits = false;
  }
  c.time = estimate_time(w, l, cluster.gpu, r.engine);
  const double n = l.gpus(), step = c.time.step_s;
  // Against the peak of the precision the GEMMs run in (FP8's when modelled).
  const double peak = r.engine.fp8_gemms ? cluster.gpu.fp8_tflops : cluster.gpu.bf16_tflops;
  c.mfu = c.time.model_flops / (n * peak * 1e12 * step);
  c.tflops_per_gpu = c.time.hardware_flops / (n * step) / 1e12;
  c.tokens_per_s = double(w.tokens_per_step()) / step;
  if (w.train_tokens > 0) {
    const double seconds = w.train_tokens / c.tokens_per_s;
    c.days = seconds / 86400;
    c.gpu_hours = seconds / 3600 * n;
    c.cost_usd = c.gpu_hours * cluster.usd_per_hour;
  }
  return c;
}

PlanResult plan(const PlanRequest& r) {
  check_request(r);
  const Workload& w = r.workload;
  const SearchSpace& s = r.space;
  PlanResult out;
  double least = -1;
  for (size_t ci = 0; ci < r.clusters.size(); ++ci) {
    const Cluster& cluster = r.clusters[ci];
    const int gpn = cluster.gpu.gpus_per_node;
    for (int tp : divisors(cluster.gpus)) {
      // A tensor-parallel group stays inside a node: its collectives run every layer.
      if ((s.tp > 0 && tp != s.tp) || (s.tp == 0 && (tp > gpn || gpn % tp != 0))) continue;
      if (w.model.n_head % tp != 0 || w.model.n_kv_head % tp != 0) continue;
      for (int pp : divisors(cluster.gpus / tp)) {
        if ((s.pp > 0 && pp != s.pp) || w.model.n_layer % pp != 0) continue;
        const int dp = cluster.gpus / tp / pp;
        if ((s.dp > 0 && dp != s.dp) || w.global_batch % dp != 0) continue;
        const int64_t rows = w.global_batch / dp;
        for (int v = 1; v <= (pp > 1 ? s.max_virtual_stages : 1); ++v) {
          if ((s.virtual_stages > 0 && v != s.virtual_stages) || w.model.n_layer % (pp * v) != 0)
            continue;
          for (int b : divisors(rows)) {
            if ((s.micro_batch > 0 && b != s.micro_batch) ||
                (s.micro_batch == 0 && b > s.max_micro_batch))
              continue;
            const int M = int(rows / b);
            for (int zero = 0; zero <= 3; ++zero) {
              if (s.zero >= 0 && zero != s.zero) continue;
              if (dp == 1 && zero > 0) continue;  // one replica: every stage is ZeRO-0
              for (nn::RecomputeMode mode : s.recompute)
                for (int sp = 0; sp <= (tp > 1 && s.try_sequence_parallel ? 1 : 0); ++sp)
                  for (int off = 0; off <= (s.try_offload ? 1 : 0); ++off) {
                    Layout l;
                    l.dp = dp, l.tp = tp, l.pp = pp, l.virtual_stages = v, l.microbatches = M;
                    l.zero = zero;
                    l.recompute.mode = mode;
                    l.sequence_parallel = sp == 1;
                    l.offload = off == 1;
                    ++out.considered;
                    if (!l.invalid_reason(w).empty()) continue;
                    ++out.valid;
                    Candidate c = evaluate(w, l, cluster, int(ci), r);
                    if (least < 0 || double(c.memory.total()) < least) {
                      least = double(c.memory.total());
                      out.smallest = c;
                    }
                    if (c.fits) out.ranked.push_back(std::move(c));
                  }
            }
          }
        }
      }
    }
  }
  std::stable_sort(
      out.ranked.begin(), out.ranked.end(),
      [&](const Candidate& a, const Candidate& b) { return rank_key(a, r) < rank_key(b, r); });
  if (out.valid == 0) {
    const std::string pins = pinned_sizes(s);
    out.nothing_fits = str_cat(
        "no layout of ", w.model_name, " on ", r.clusters.front().gpus, " GPUs is valid",
        pins.empty() ? "" : " with " + pins + " pinned", ": the GPU count, layers (",
        w.model.n_layer, "), heads (", w.model.n_head, ") and global batch (", w.global_batch,
        ") admit no dp x tp x pp split the engine runs", pins.empty() ? "" : " with them");
  } else if (out.ranked.empty()) {
    const Candidate& c = out.smallest;
    out.nothing_fits =
        str_cat(w.model_name, " fits nowhere: its smallest layout (", c.layout.describe(w),
                ") needs ", c.memory.total() >= int64_t(kBeyondAnyGpu) ? "more than " : "",
                c.memory.total() / 1e9, " GB per GPU against ", c.usable_bytes / 1e9,
                " GB usable on ", r.clusters[size_t(c.cluster)].gpu.name,
                "; use more GPUs, a larger GPU or a shorter "
                "sequence");
  }
  return out;
}

std::vector<Candidate> best_per_tp_pp(const PlanResult& result) {
  std::vector<Candidate> out;
  std::map<std::pair<int, int>, bool> seen;
  for (const Candidate& c : result.ranked)
    if (seen.emplace(std::pair{c.layout.tp, c.layout.pp}, true).second) out.push_back(c);
  return out;
}

}  // namespace tessera::plan
