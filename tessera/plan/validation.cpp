#include "tessera/plan/validation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tessera/core/error.h"
#include "tessera/plan/detail/text.h"

namespace tessera::plan {

using detail::fixed;

namespace {

std::string percent_diff(double plan, double paper) {
  const double d = 100 * (plan - paper) / paper;
  return (d >= 0 ? "+" : "") + fixed(d, 1) + "%";
}

// DeepSpeed's ZeRO-3 as the paper ran it: materialized attention, 16-bit gradients and
// parameter gathers, one collective per parameter tensor, waited for before its module runs.
EngineProfile deepspeed_2021() {
  EngineProfile p = EngineProfile::megatron_2021();
  p.name = "deepspeed-zero3-2021";
  p.scatter_gather_p2p = false;
  p.dp_overlap = true;
  p.grad_comm_bytes = 2;
  p.p2p_every_step = false;
  p.zero3_per_tensor = true;
  p.zero3_overlap = false;
  return p;
}

PlanRequest request_on(const std::string& model, int gpus, int batch, const GpuTable& table) {
  PlanRequest r;
  r.workload.model = plan_model(model);
  r.workload.model_name = model;
  r.workload.seq_len = 2048;
  r.workload.global_batch = batch;
  r.workload.train_tokens = 300e9;
  r.workload.precision = nn::Precision::bf16;
  r.clusters = {Cluster::of(table.find("a100-80gb"), gpus)};
  r.engine = EngineProfile::megatron_2021();
  r.space.zero = 0;  // Megatron-LM 2021 had no distributed optimizer
  r.space.recompute = {nn::RecomputeMode::full};
  r.space.try_sequence_parallel = false;  // introduced in 2022
  return r;
}

struct Table1Source {
  const char* model;
  double params_b;
  int t, p, gpus, batch;
  double tflops;
};

// Narayanan et al. 2021, Table 1 (../shared/reference/megatron-2021-tables.md).
const Table1Source kTable1[] = {
    {"megatron-1.7b", 1.7, 1, 1, 32, 512, 137},
    {"megatron-3.6b", 3.6, 2, 1, 64, 512, 138},
    {"megatron-7.5b", 7.5, 4, 1, 128, 512, 142},
    {"megatron-18b", 18.4, 8, 1, 256, 1024, 135},
    {"megatron-39b", 39.1, 8, 2, 512, 1536, 138},
    {"megatron-76b", 76.1, 8, 4, 1024, 1792, 140},
    {"megatron-146b", 145.6, 8, 8, 1536, 2304, 148},
    {"megatron-310b", 310.1, 8, 16, 1920, 2160, 155},
    {"megatron-530b", 529.6, 8, 35, 2520, 2520, 163},
    {"megatron-1t", 1008.0, 8, 64, 3072, 3072, 163},
};

struct Table2Source {
  const char* model;
  const char* scheme;
  int gpus, batch, mp;
  double tflops, days;
};

// Narayanan et al. 2021, Table 2: 300B tokens.
const Table2Source kTable2[] = {
    {"gpt3-175b", "ZeRO-3", 384, 1536, 1, 144, 90},
    {"gpt3-175b", "ZeRO-3", 768, 1536, 1, 88, 74},
    {"gpt3-175b", "ZeRO-3", 1536, 1536, 1, 44, 74},
    {"gpt3-175b", "PTD-P", 384, 1536, 96, 153, 84},
    {"gpt3-175b", "PTD-P", 768, 1536, 96, 149, 43},
    {"gpt3-175b", "PTD-P", 1536, 1536, 96, 141, 23},
    {"megatron-530b", "ZeRO-3", 640, 2560, 1, 138, 169},
    {"megatron-530b", "ZeRO-3", 1120, 2240, 1, 98, 137},
    {"megatron-530b", "ZeRO-3", 2240, 2240, 1, 48, 140},
    {"megatron-530b", "PTD-P", 560, 2240, 280, 171, 156},
    {"megatron-530b", "PTD-P", 1120, 2240, 280, 167, 80},
    {"megatron-530b", "PTD-P", 2240, 2240, 280, 159, 42},
};

double block_params(const nn::GPTConfig& m) { return double(block_parameters(m)); }

}  // namespace

PlanRequest megatron_request(const std::string& model, int gpus, int batch) {
  return request_on(model, gpus, batch, GpuTable::builtin());
}

double days_to_train(double params, double tokens, int gpus, double flops_per_gpu) {
  return 8 * tokens * params / (double(gpus) * flops_per_gpu) / 86400;
}

double deepspeed_zero3_gpu_bytes(double params, double largest_layer_params, int gpus) {
  return 4 * largest_layer_params + 18 * params / gpus;
}

ValidationReport validate_published_runs(const GpuTable& table) {
  ValidationReport out;
  for (const Table1Source& s : kTable1) {
    Table1Row row;
    row.model = s.model, row.params_b = s.params_b, row.t = s.t, row.p = s.p;
    row.gpus = s.gpus, row.batch = s.batch, row.achieved_tflops = s.tflops;
    const PlanRequest r = request_on(s.model, s.gpus, s.batch, table);
    const std::vector<Candidate> best = best_per_tp_pp(plan(r));
    if (!best.empty()) {
      row.best_layout = best[0].layout.describe(r.workload);
      row.best_step_s = best[0].time.step_s;
      row.best_bubble_s = best[0].time.bubble_s;
    }
    for (size_t i = 0; i < best.size(); ++i) {
      if (i < 3) row.top_pairs.emplace_back(best[i].layout.tp, best[i].layout.pp);
      if (best[i].layout.tp == s.t && best[i].layout.pp == s.p) {
        row.rank_of_paper_pair = int(i) + 1;
        row.predicted_tflops = best[i].tflops_per_gpu;
        row.predicted_layout = best[i].layout.describe(r.workload);
        row.paper_step_s = best[i].time.step_s;
        row.paper_tp_comm_s = best[i].time.tp_comm_s;
      }
    }
    out.table1.push_back(row);
  }
  for (const Table2Source& s : kTable2) {
    Table2Row row;
    row.model = s.model, row.scheme = s.scheme, row.gpus = s.gpus, row.batch = s.batch;
    row.mp = s.mp, row.achieved_tflops = s.tflops, row.paper_days = s.days;
    PlanRequest r = request_on(s.model, s.gpus, s.batch, table);
    const nn::GPTConfig& m = r.workload.model;
    const double per_token = narayanan_flops(1, 2048, double(m.n_layer), double(m.n_embd),
                                             double(m.padded_vocab_size())) /
                             2048;
    row.days_from_achieved = 300e9 * per_token / (s.gpus * s.tflops * 1e12) / 86400;
    if (std::string(s.scheme) == "ZeRO-3") {
      r.engine = deepspeed_2021();
      r.space.zero = 3;
      r.space.tp = 1;
      r.space.pp = 1;
    } else {
      r.space.tp = 8;
      r.space.pp = s.mp / 8;
    }
    const PlanResult p = plan(r);
    if (!p.ranked.empty()) row.predicted_tflops = p.ranked.front().tflops_per_gpu;
    out.table2.push_back(row);
  }
  for (const Table2Row& z : out.table2) {
    if (z.scheme != "ZeRO-3" || z.gpus < 768) continue;
    for (const Table2Row& d : out.table2)
      if (d.scheme == "PTD-P" && d.model == z.model && d.gpus == z.gpus)
        out.schemes.push_back({z.model, z.gpus, d.predicted_tflops, z.predicted_tflops});
  }
  for (const char* model : {"llama-7b-like", "llama-13b-like", "llama-70b-like", "gpt3-175b"}) {
    struct Choice {
      const char* gpu;
      bool fp8;
    };
    for (const Choice ch : {Choice{"a100-80gb", false}, Choice{"h100", false}, Choice{"h100", true},
                            Choice{"h200", false}}) {
      PlanRequest r;
      r.workload.model = plan_model(model);
      r.workload.model_name = model;
      r.workload.seq_len = 2048;
      r.workload.global_batch = 2048;  // 4M tokens a step
      const double params = double(parameter_count(r.workload.model));
      r.workload.train_tokens = 20 * params;
      r.clusters = {Cluster::of(table.find(ch.gpu), 512)};
      r.engine.fp8_gemms = ch.fp8;
      r.rank_by = RankBy::cost;
      const PlanResult p = plan(r);
      HardwareRow row;
      row.model = model;
      row.params_b = params / 1e9;
      row.tokens = r.workload.train_tokens;
      row.gpu = std::string(ch.gpu) + (ch.fp8 ? " fp8" : "");
      row.usd_per_hour = r.clusters[0].usd_per_hour;
      if (!p.ranked.empty()) {
        const Candidate& c = p.ranked.front();
        row.days = c.days, row.cost_usd = c.cost_usd, row.mfu = c.mfu;
        row.layout = c.layout.describe(r.workload);
      }
      out.hardware.push_back(row);
    }
  }
  out.days_175b = days_to_train(175e9, 300e9, 1024, 140e12);
  out.days_1t = days_to_train(1e12, 450e9, 3072, 163e12);
  for (auto [model, gpus] : {std::pair{"gpt3-175b", 384}, std::pair{"gpt3-175b", 1536},
                             std::pair{"megatron-530b", 2240}, std::pair{"llama-70b-like", 64}}) {
    ZeroEstimatorRow z;
    z.model = model;
    z.gpus = gpus;
    const nn::GPTConfig m = plan_model(model);
    const double P = double(parameter_count(m));
    const double embedding = double(m.padded_vocab_size() * m.n_embd);
    z.deepspeed_bytes = deepspeed_zero3_gpu_bytes(P, std::max(block_params(m), embedding), gpus);
    z.deepspeed_18pn_bytes = 18 * P / gpus;
    Layout l;
    l.dp = gpus;
    l.zero = 3;
    const ModelStates s = model_state_bytes(m, l, nn::Precision::bf16, 0);
    z.plan_18pn_bytes = double(s.parameters + s.gradients + s.optimizer);
    // Plus what ZeRO-3 gathers while it runs: three of the largest units in bf16.
    z.plan_states_bytes = z.plan_18pn_bytes + 3 * 2 * std::max(block_params(m), embedding);
    out.zero3.push_back(z);
  }
  return out;
}

std::string format_validation(const ValidationReport& r) {
  std::string s;
  s += "Table 1 (Narayanan et al. 2021): the paper's (t, p) among plan's ranked (t, p) pairs, and "
       "TFLOP/s per GPU\n\n";
  s += "| model | GPUs | batch | paper (t, p) | plan's top 3 (t, p) | rank | paper TFLOP/s | plan "
       "TFLOP/s | diff | plan's layout for the paper's pair "
       "|\n|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Table1Row& t : r.table1) {
    std::string top;
    for (auto [a, b] : t.top_pairs) top += (top.empty() ? "" : " ") + str_cat("(", a, ",", b, ")");
    s += str_cat("| ", fixed(t.params_b, 1), "B | ", t.gpus, " | ", t.batch, " | (", t.t, ",", t.p,
                 ") | ", top, " | ", t.rank_of_paper_pair, " | ", fixed(t.achieved_tflops, 0),
                 " | ", fixed(t.predicted_tflops, 0), " | ",
                 t.predicted_tflops > 0 ? percent_diff(t.predicted_tflops, t.achieved_tflops) : "-",
                 " | ", t.predicted_layout, " |\n");
  }
  for (const Table1Row& t : r.table1)
    if (t.rank_of_paper_pair > 3)
      s += str_cat("\n", fixed(t.params_b, 1), "B: plan's best, ", t.best_layout, ", ",
                   fixed(t.best_step_s, 2), " s a step (bubble ", fixed(t.best_bubble_s, 2),
                   " s); the paper's pair ", fixed(t.paper_step_s, 2),
                   " s, of which tensor-parallel "
                   "all-reduces ",
                   fixed(t.paper_tp_comm_s, 2), " s");
  s += "\n\nTable 2 (300B tokens): days from the paper's TFLOP/s through eq. 3, and plan's own "
       "TFLOP/s\n\n| model | scheme | GPUs | batch | paper days | days from paper TFLOP/s | diff | "
       "paper TFLOP/s | plan TFLOP/s | diff |\n|---|---|---|---|---|---|---|---|---|---|\n";
  for (const Table2Row& t : r.table2)
    s += str_cat(
        "| ", t.model, " | ", t.scheme, t.mp > 1 ? str_cat(" (MP ", t.mp, ")") : "", " | ", t.gpus,
        " | ", t.batch, " | ", fixed(t.paper_days, 0), " | ", fixed(t.days_from_achieved, 1), " | ",
        percent_diff(t.days_from_achieved, t.paper_days), " | ", fixed(t.achieved_tflops, 0), " | ",
        fixed(t.predicted_tflops, 0), " | ",
        t.predicted_tflops > 0 ? percent_diff(t.predicted_tflops, t.achieved_tflops) : "-", " |\n");
  s += "\nPTD-P against ZeRO-3 at 768 GPUs or more (plan's TFLOP/s per GPU)\n\n| model | GPUs | "
       "PTD-P | ZeRO-3 | PTD-P faster |\n|---|---|---|---|---|\n";
  for (const auto& x : r.schemes)
    s += str_cat("| ", x.model, " | ", x.gpus, " | ", fixed(x.ptdp_tflops, 0), " | ",
                 fixed(x.zero3_tflops, 0), " | ", x.ptdp_tflops > x.zero3_tflops ? "yes" : "no",
                 " |\n");
  s += str_cat("\n§5.1: 175B on 300B tokens, 1024 GPUs at 140 TFLOP/s: ", fixed(r.days_175b, 1),
               " days (paper: 34); 1T on 450B tokens, 3072 GPUs at 163 TFLOP/s: ",
               fixed(r.days_1t, 1), " days (paper: 84)\n");
  s += "\nHardware choice: 20 tokens per parameter on 512 GPUs, the cheapest layout of each\n\n"
       "| model | tokens | GPU | $/GPU-h | days | cost | vs A100 80GB | MFU | layout |\n"
       "|---|---|---|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < r.hardware.size(); ++i) {
    const HardwareRow& h = r.hardware[i];
    const HardwareRow& a100 = r.hardware[i - i % 4];
    s += str_cat(
        "| ", h.model, " | ", fixed(h.tokens / 1e9, 0), "B | ", h.gpu, " | ",
        fixed(h.usd_per_hour, 2), " | ", fixed(h.days, 1), " | $",
        h.cost_usd < 1e6 ? fixed(h.cost_usd / 1e3, 1) + "k" : fixed(h.cost_usd / 1e6, 2) + "M",
        " | ", h.cost_usd > 0 && a100.cost_usd > 0 ? fixed(h.cost_usd / a100.cost_usd, 2) : "-",
        " | ", fixed(100 * h.mfu, 1), "% | ", h.layout, " |\n");
  }
  s += "\nDeepSpeed's ZeRO-3 estimator (GPU, no offload: 4 L + 18 P / N bytes) against plan's bf16 "
       "ZeRO-3: the model states, then what each adds while the units run\n\n| model | GPUs | "
       "DeepSpeed 18 P / N GB | plan model states GB | diff | DeepSpeed 4 L GB | plan's gathered "
       "units GB |\n|---|---|---|---|---|---|---|\n";
  for (const ZeroEstimatorRow& z : r.zero3) {
    const double states = z.deepspeed_18pn_bytes;
    s += str_cat("| ", z.model, " | ", z.gpus, " | ", fixed(states / 1e9, 3), " | ",
                 fixed(z.plan_18pn_bytes / 1e9, 3), " | ", percent_diff(z.plan_18pn_bytes, states),
                 " | ", fixed((z.deepspeed_bytes - states) / 1e9, 2), " | ",
                 fixed((z.plan_states_bytes - z.plan_18pn_bytes) / 1e9, 2), " |\n");
  }
  return s;
}

}  // namespace tessera::plan
