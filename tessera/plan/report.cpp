#include "tessera/plan/report.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/plan/detail/text.h"

namespace tessera::plan {

using detail::fixed;

namespace {

std::string pad(const std::string& s, size_t width, bool right = false) {
  if (s.size() >= width) return s;
  return right ? std::string(width - s.size(), ' ') + s : s + std::string(width - s.size(), ' ');
}

// 1.2k, 3.4M, 5.6B: tokens/s and GPU-hours read faster rounded.
std::string short_number(double v) {
  const char* suffix[] = {"", "k", "M", "B", "T"};
  if (!(v < 1e15)) return fixed(v, 0);  // 2.4e+37, inf
  int k = 0;
  while (v >= 1000 && k < 4) v /= 1000, ++k;
  return fixed(v, v < 10 && k > 0 ? 2 : (v < 100 && k > 0 ? 1 : 0)) + suffix[k];
}

}  // namespace

std::string format_plan_table(const PlanRequest& r, const PlanResult& result, int top) {
  const Workload& w = r.workload;
  std::string out = str_cat(
      w.model_name, ": ", fixed(double(parameter_count(w.model)) / 1e9, 2), "B parameters, ",
      w.model.n_layer, " layers, width ", w.model.n_embd, ", ", w.model.n_head, " heads (",
      w.model.n_kv_head, " kv), ", nn::precision_name(w.precision), "; batch ", w.global_batch,
      " x ", w.seq_len, " = ", short_number(double(w.tokens_per_step())), " tokens a step",
      w.train_tokens > 0 ? str_cat(", ", short_number(w.train_tokens), " tokens to train") : "",
      "\n");
  out += str_cat(result.valid, " valid layouts of ", result.considered, " considered, ",
                 result.ranked.size(), " fit; ranked by ",
                 r.rank_by == RankBy::cost ? "cost" : "step time", "\n");
  if (result.ranked.empty()) return out + result.nothing_fits + "\n";
  const std::vector<std::pair<std::string, size_t>> cols = {
      {"#", 3},      {"gpu", 10},  {"layout", 40}, {"GB/GPU", 7}, {"p+g+o/act/buf", 17},
      {"step s", 8}, {"MFU", 6},   {"TFLOP/s", 8}, {"tok/s", 7},  {"days", 7},
      {"GPU-h", 7},  {"cost $", 7}};
  std::string header;
  for (const auto& [name, width] : cols)
    header += pad(name, width, name != "layout" && name != "gpu") + " ";
  out += header + "\n";
  const int n = std::min<int>(top, int(result.ranked.size()));
  for (int i = 0; i < n; ++i) {
    const Candidate& c = result.ranked[size_t(i)];
    const MemoryEstimate& m = c.memory;
    const std::string parts =
        str_cat(fixed(double(m.parameters + m.gradients + m.optimizer) / 1e9, 1), "/",
                fixed(double(m.activations) / 1e9, 1), "/", fixed(double(m.buffers) / 1e9, 1));
    const bool tokens = w.train_tokens > 0;
    const std::vector<std::string> cells = {std::to_string(i + 1),
                                            r.clusters[size_t(c.cluster)].gpu.name,
                                            c.layout.describe(w),
                                            fixed(double(m.total()) / 1e9, 1),
                                            parts,
                                            fixed(c.time.step_s, c.time.step_s < 10 ? 3 : 1),
                                            fixed(100 * c.mfu, 1) + "%",
                                            fixed(c.tflops_per_gpu, c.tflops_per_gpu < 10 ? 2 : 0),
                                            short_number(c.tokens_per_s),
                                            tokens ? detail::fixed_or_small(c.days, 1) : "-",
                                            tokens ? short_number(c.gpu_hours) : "-",
                                            tokens ? short_number(c.cost_usd) : "-"};
    std::string row;
    for (size_t k = 0; k < cols.size(); ++k)
      row += pad(cells[k], cols[k].second, k != 1 && k != 2) + " ";
    out += row + "\n";
  }
  return out;
}

std::string format_checkpoints(const CheckpointPlan& p, double days) {
  const CheckpointEconomics& e = p.economics;
  if (p.model.node_failures_per_day == 0)
    return str_cat("checkpoints: ", p.nodes, " node", p.nodes == 1 ? "" : "s",
                   " and no failures assumed; a ", detail::significant(p.checkpoint_bytes / 1e9),
                   " GB save takes ", fixed(p.model.write_s, 1),
                   " s to write: save at the end, goodput 100.0%");
  std::string s = str_cat(
      "checkpoints: ", p.nodes, " node", p.nodes == 1 ? "" : "s", " at ",
      detail::significant(p.model.node_failures_per_day), " failures per node-day fail every ",
      fixed(e.mtbf_s / 3600, 2), " h; a ", detail::significant(p.checkpoint_bytes / 1e9),
      " GB save stalls ", fixed(p.model.save_stall_s, 1), " s and takes ",
      fixed(p.model.write_s, 1), " s to write, a restart ", fixed(p.model.restart_s, 0), " s (",
      p.source, "); save every ", fixed(e.interval_s / 60, 1), " min (Young), ",
      fixed(e.lost_per_failure_s / 60, 1), " min lost per failure, goodput ",
      fixed(100 * e.goodput, 1), "%");
  if (days > 0)
    s += str_cat(", ", detail::fixed_or_small(e.failures, 0), " failures expected over the ",
                 detail::fixed_or_small(days, 0), " days");
  return s;
}

nlohmann::json checkpoints_to_json(const CheckpointPlan& p) {
  const CheckpointEconomics& e = p.economics;
  return {{"nodes", p.nodes},
          {"checkpoint_bytes", p.checkpoint_bytes},
          {"node_failures_per_day", p.model.node_failures_per_day},
          {"save_stall_s", p.model.save_stall_s},
          {"write_s", p.model.write_s},
          {"restart_s", p.model.restart_s},
          {"mtbf_s", e.mtbf_s},
          {"interval_s", e.interval_s},
          {"lost_per_failure_s", e.lost_per_failure_s},
          {"goodput", e.goodput},
          {"failures", e.failures},
          {"source", p.source}};
}

nlohmann::json candidate_to_json(const PlanRequest& r, const Candidate& c) {
  const Workload& w = r.workload;
  const Layout& l = c.layout;
  const MemoryEstimate& m = c.memory;
  const TimeEstimate& t = c.time;
  return {{"gpu", r.clusters[size_t(c.cluster)].gpu.name},
          {"gpus", l.gpus()},
          {"layout",
           {{"dp", l.dp},
            {"tp", l.tp},
            {"pp", l.pp},
            {"virtual_stages", l.virtual_stages},
            {"microbatches", l.microbatches},
            {"micro_batch", l.micro_batch(w)},
            {"zero", l.zero},
            {"recompute", l.recompute.describe()},
            {"sequence_parallel", l.sequence_parallel},
            {"offload", l.offload},
            {"describe", l.describe(w)},
            {"train_flags", l.train_flags()}}},
          {"memory_bytes",
           {{"pp_rank", m.pp_rank},
            {"parameters", m.parameters},
            {"gradients", m.gradients},
            {"optimizer", m.optimizer},
            {"activations", m.activations},
            {"buffers", m.buffers},
            {"offloaded", m.offloaded},
            {"in_flight", m.in_flight},
            {"total", m.total()},
            {"capacity", c.capacity_bytes},
            {"usable", c.usable_bytes}}},
          {"time_s",
           {{"step", t.step_s},
            {"pipeline", t.pipeline_s},
            {"forward_chunk", t.forward_chunk_s},
            {"backward_chunk", t.backward_chunk_s},
            {"bubble", t.bubble_s},
            {"tp_comm", t.tp_comm_s},
            {"p2p", t.p2p_s},
            {"dp_comm", t.dp_comm_s},
            {"dp_exposed", t.dp_exposed_s},
            {"zero3_exposed", t.zero3_exposed_s},
            {"optimizer", t.optimizer_s}}},
          {"hardware_flops_per_step", t.hardware_flops},
          {"model_flops_per_step", t.model_flops},
          {"mfu", c.mfu},
          {"tflops_per_gpu", c.tflops_per_gpu},
          {"tokens_per_s", c.tokens_per_s},
          {"days", c.days},
          {"gpu_hours", c.gpu_hours},
          {"cost_usd", c.cost_usd}};
}

nlohmann::json plan_to_json(const PlanRequest& r, const PlanResult& result, int top) {
  const Workload& w = r.workload;
  nlohmann::json clusters = nlohmann::json::array();
  for (const Cluster& c : r.clusters)
    clusters.push_back(
        {{"gpu", c.gpu.to_json()}, {"gpus", c.gpus}, {"usd_per_hour", c.usd_per_hour}});
  nlohmann::json rows = nlohmann::json::array();
  for (int i = 0; i < std::min<int>(top, int(result.ranked.size())); ++i)
    rows.push_back(candidate_to_json(r, result.ranked[size_t(i)]));
  return {{"format", "tessera-plan"},
          {"version", 1},
          {"workload",
           {{"model", w.model_name},
            {"config", w.model.to_json()},
            {"parameters", parameter_count(w.model)},
            {"seq_len", w.seq_len},
            {"global_batch", w.global_batch},
            {"train_tokens", w.train_tokens},
            {"precision", nn::precision_name(w.precision)}}},
          {"engine", r.engine.name},
          {"rank_by", r.rank_by == RankBy::cost ? "cost" : "time"},
          {"clusters", clusters},
          {"considered", result.considered},
          {"valid", result.valid},
          {"fit", result.ranked.size()},
          {"nothing_fits", result.nothing_fits},
          {"ranked", rows}};
}

}  // namespace tessera::plan
