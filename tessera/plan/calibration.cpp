#include "tessera/plan/calibration.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "tessera/core/device.h"
#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/json_depth.h"
#include "tessera/data/load_tokenizer.h"
#include "tessera/plan/detail/text.h"
#include "tessera/train/metrics.h"
#include "tessera/train/options.h"

namespace tessera::plan {

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// The JSON objects of a JSONL file, one per non-empty line; a torn last line (a crash while
// it was written) is skipped, any other unreadable line names the file and line.
std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  if (!in) return out;
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  for (size_t i = 0; i < lines.size(); ++i) {
    try {
      check_json_depth(lines[i], str_cat(path, ":", i + 1));
      nlohmann::json j = nlohmann::json::parse(lines[i]);
      TESSERA_CHECK(j.is_object(), path, ":", i + 1, ": not a JSON object");
      out.push_back(std::move(j));
    } catch (const nlohmann::json::exception& e) {
      if (i + 1 == lines.size()) break;  // torn last record
      tessera::detail::throw_error(path, ":", i + 1, ": not JSON: ", e.what());
    }
  }
  return out;
}

double number(const nlohmann::json& j, const char* key, double fallback = 0) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
}

// The model_config of the checkpoint `latest` names (a gathered set's state.json or a sharded
// one's manifest.json), or nothing when the run saved none.
std::optional<nn::GPTConfig> checkpoint_model_config(const std::string& run_dir) {
  namespace fs = std::filesystem;
  const fs::path latest = fs::path(run_dir) / "checkpoints" / "latest";
  if (!fs::is_regular_file(latest)) return std::nullopt;
  std::string name = read_text_file(latest.string());
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  for (const char* file : {"state.json", "manifest.json"}) {
    const fs::path path = fs::path(run_dir) / "checkpoints" / name / file;
    if (!fs::is_regular_file(path)) continue;
    const nlohmann::json j = plan::detail::parse_json(read_text_file(path.string()), path.string());
    if (j.is_object() && j.contains("state") && j["state"].is_object() &&
        j["state"].contains("model_config"))
      return nn::GPTConfig::from_json(j["state"]["model_config"]);
  }
  return std::nullopt;
}

// Pure compute the model predicts for the run's layout: the pipeline's work without its
// bubble, transfers and tensor-parallel collectives.
double model_compute(const Workload& w, const Layout& l, const GpuSpec& g) {
  const TimeEstimate t = estimate_time(w, l, g);
  return t.pipeline_s - t.bubble_s - t.p2p_s - t.tp_comm_s;
}

}  // namespace

GpuSpec cpu_spec() {
  GpuSpec g;
  g.name = "cpu";
  const int cores = std::max(1, int(std::thread::hardware_concurrency()));
  std::string how;
  g.bf16_tflops = train::cpu_peak_gflops(cores, &how) / 1000;  // the fp32 peak: CPU runs are f32
  g.description = str_cat("this machine's CPU, ", cores, " cores (", how, ")");
  g.memory_gb = 1;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string key; meminfo >> key;) {
    double kb = 0;
    meminfo >> kb;
    if (key == "MemTotal:") g.memory_gb = kb * 1024 / 1e9;
    meminfo.ignore(1 << 10, '\n');
  }
  // Assumptions until calibrated: a few DDR channels, shared memory between the ranks.
  g.hbm_gbps = 20;
  g.nvlink_gbps = 5;
  g.nvlink_latency_us = 2;
  g.network_gbps = 1.25;
  g.network_latency_us = 50;
  g.gpus_per_node = cores;
  g.pcie_gbps = 20;
  g.host_gbps = 20;
  g.gemm_efficiency = 0.5;
  g.memory_efficiency = 0.7;
  g.usd_per_hour = 0;
  g.price_source = "none: a CPU run to calibrate from";
  g.sources = {"train::cpu_peak_gflops (clock x cores x FLOPs per cycle), /proc/meminfo"};
  return g;
}

Calibration calibrate(const std::string& run_dir, const GpuSpec* gpu, int skip_steps) {
  namespace fs = std::filesystem;
  Calibration c;
  c.run_dir = run_dir;
  const std::string config_path = (fs::path(run_dir) / "config.json").string();
  TESSERA_CHECK(fs::is_regular_file(config_path), "plan --calibrate: ", run_dir,
                " has no config.json (is it a tessera train run directory?)");
  train::TrainOptions o;
  { o.update_from_json(plan::detail::parse_json(read_text_file(config_path), config_path)); }
  c.device = o.device;
  // The model as the run resolved it: the newest checkpoint's model_config, else the options
  // with the vocabulary of the run's tokenizer (as train/run_setup.cpp's resolve_config).
  std::optional<nn::GPTConfig> resolved = checkpoint_model_config(run_dir);
  if (!resolved) {
    nn::GPTConfig m = o.model_config();
    if (!o.model_overrides.contains("vocab_size"))
      m.vocab_size = data::load_tokenizer(o.tokenizer)->vocab_size();
    resolved = m;
  }
  const bool on_cpu = Device::parse(o.device).type == DeviceType::cpu;
  TESSERA_CHECK(on_cpu || gpu != nullptr, "plan --calibrate: ", run_dir, " ran on ", o.device,
                "; name the GPU type it ran on with --gpu");
  TESSERA_CHECK(!on_cpu || gpu == nullptr, "plan --calibrate: ", run_dir,
                " ran on the CPU, so a GPU type (--gpu ", gpu ? gpu->name : "", ") cannot apply");
  const GpuSpec base = on_cpu ? cpu_spec() : *gpu;
  c.workload.model = *resolved;
  c.workload.model_name = str_cat(run_dir, " (", o.preset, ")");
  c.workload.seq_len = o.seq_len;
  c.workload.global_batch = o.batch_size * (o.parallel() ? 1 : o.grad_accum);
  c.workload.precision = o.precision_policy();
  Layout& l = c.layout;
  l.dp = int(o.dp), l.tp = int(o.tp), l.pp = int(o.pp);
  l.virtual_stages = int(o.virtual_stages);
  l.microbatches = int(o.parallel() ? o.microbatches : o.grad_accum);
  l.zero = int(o.zero);
  l.recompute = o.recompute_policy();
  l.sequence_parallel = o.sequence_parallel;
  l.offload = o.offload == "optimizer";
  c.ranks = l.gpus();

  const std::string metrics_path = (fs::path(run_dir) / "metrics.jsonl").string();
  const std::vector<nlohmann::json> lines = read_jsonl(metrics_path);
  TESSERA_CHECK(int64_t(lines.size()) > skip_steps, metrics_path, " has ", lines.size(),
                " steps; calibration skips the first ", skip_steps,
                " (warm-up) and needs at least one more");
  std::vector<double> step, compute, comm, optimizer, bytes;
  bool have_memory = false;
  for (size_t i = size_t(skip_steps); i < lines.size(); ++i) {
    const nlohmann::json& j = lines[i];
    TESSERA_CHECK(j.contains("phases") && j["phases"].is_object(), metrics_path, ":", i + 1,
                  ": no 'phases' (written by a Tessera older than 2026-12-04?)");
    // Every rank's phases where the run logged them; else the one process's.
    std::vector<nlohmann::json> ranks;
    if (j.contains("ranks") && j["ranks"].is_array() && !j["ranks"].empty())
      for (const auto& r : j["ranks"]) ranks.push_back(r);
    else
      ranks.push_back({{"phases", j["phases"]}, {"comm_ms", number(j["phases"], "comm_ms")}});
    double s = 0, busy = 0, blocked = 0, opt = 0, sent = 0;
    for (const nlohmann::json& r : ranks) {
      const nlohmann::json& p = r["phases"];
      const double rank_comm = number(r, "comm_ms");
      s = std::max(s, number(p, "step_ms"));
      opt = std::max(opt, number(p, "optimizer_ms"));
      busy = std::max(busy, number(p, "step_ms") - rank_comm - number(p, "optimizer_ms"));
      blocked = std::max(blocked, rank_comm);
      sent = std::max(sent, number(r, "comm_bytes"));
    }
    step.push_back(s / 1e3), compute.push_back(busy / 1e3), comm.push_back(blocked / 1e3);
    optimizer.push_back(opt / 1e3), bytes.push_back(sent);
    if (!ranks.empty() && ranks[0].contains("param_bytes")) {
      have_memory = true;
      c.measured_parameters = ranks[0]["param_bytes"].get<int64_t>();
      c.measured_gradients = ranks[0]["grad_bytes"].get<int64_t>();
      c.measured_optimizer = ranks[0]["optim_bytes"].get<int64_t>();
      c.measured_activations = ranks[0]["act_bytes"].get<int64_t>();
    }
  }
  c.steps = int64_t(step.size());
  c.step_s = median(step), c.compute_s = median(compute), c.comm_s = median(comm);
  c.optimizer_s = median(optimizer), c.comm_bytes = median(bytes);
  TESSERA_CHECK(c.compute_s > 0, metrics_path, ": the steps show no compute time");

  const double fraction = l.recompute.mode != nn::RecomputeMode::full ? 0
                          : l.recompute.num_layers < 0
                              ? 1
                              : std::min(1.0, double(l.recompute.num_layers) /
                                                  double(c.workload.model.n_layer /
                                                         (int64_t(l.pp) * l.virtual_stages)));
  c.flops_per_rank =
      training_flops(c.workload.model, c.workload.global_batch, c.workload.seq_len, fraction) /
      c.ranks;
  c.achieved_tflops = c.flops_per_rank / c.compute_s / 1e12;

  // Fit the GEMM efficiency: model_compute falls as it rises; bisect on [1e-4, 1].
  c.calibrated = base;
  auto compute_at = [&](double eta) {
    GpuSpec g = base;
    g.gemm_efficiency = eta;
    return model_compute(c.workload, l, g);
  };
  if (compute_at(1.0) > c.compute_s) {
    c.gemm_efficiency = 1.0;
    c.notes.push_back(str_cat("the run computed faster than ", base.name,
                              "'s peak allows (its elementwise bandwidth or peak is set too low):"
                              " the GEMM efficiency is held at 1"));
  } else {
    double lo = 1e-4, hi = 1.0;
    for (int i = 0; i < 60; ++i) {
      const double mid = std::sqrt(lo * hi);
      (compute_at(mid) > c.compute_s ? lo : hi) = mid;
    }
    c.gemm_efficiency = hi;
  }
  c.calibrated.gemm_efficiency = c.gemm_efficiency;
  if (c.comm_s > 0 && c.comm_bytes > 0) {
    c.comm_gbps = c.comm_bytes / c.comm_s / 1e9;
    c.calibrated.nvlink_gbps = c.comm_gbps;
    c.notes.push_back(str_cat("communication: ", c.comm_gbps, " GB/s per rank measured inside one ",
                              "node; the inter-node link (", base.network_gbps,
                              " GB/s) is kept from the table, since no run here crossed one"));
  } else {
    c.notes.push_back("communication: the run sent nothing, so the links are kept from the table");
  }
  c.calibrated.name = base.name;
  c.calibrated.description = str_cat(base.description, ", calibrated from ", run_dir);
  c.planned_states = model_state_bytes(c.workload.model, l, c.workload.precision, 0);
  c.planned_memory = estimate_memory(c.workload, l, 0, {0});
  if (!have_memory)
    c.notes.push_back("memory: the run logged no per-rank bytes (a single process); not checked");

  std::vector<double> stalls, recoveries;
  for (const nlohmann::json& s : read_jsonl((fs::path(run_dir) / "checkpoints.jsonl").string()))
    if (s.value("tier", "durable") == "durable" && s.contains("stall_ms"))
      stalls.push_back(number(s, "stall_ms") / 1e3);
  for (const nlohmann::json& r : read_jsonl((fs::path(run_dir) / "restarts.jsonl").string()))
    if (r.contains("seconds_to_recover")) recoveries.push_back(number(r, "seconds_to_recover"));
  if (!stalls.empty()) c.save_stall_s = median(stalls);
  if (!recoveries.empty()) c.restart_s = median(recoveries);
  return c;
}

std::string format_calibration(const Calibration& c) {
  char b[256];
  std::string s = str_cat("calibrated from ", c.run_dir, ": ", c.ranks, " rank",
                          c.ranks == 1 ? "" : "s", " on ", c.device, ", ",
                          c.layout.describe(c.workload), ", ", c.steps, " steps used\n");
  std::snprintf(b, sizeof b,
                "  step %.1f ms: compute %.1f ms, blocked communication %.1f ms, optimizer %.1f ms "
                "(medians of the slowest rank)\n",
                1e3 * c.step_s, 1e3 * c.compute_s, 1e3 * c.comm_s, 1e3 * c.optimizer_s);
  s += b;
  std::snprintf(
      b, sizeof b,
      "  compute: %.3g FLOPs per rank and step in %.1f ms = %.3f TFLOP/s; GEMM efficiency "
      "%.3f of %s's %.3g TFLOP/s peak\n",
      c.flops_per_rank, 1e3 * c.compute_s, c.achieved_tflops, c.gemm_efficiency,
      c.calibrated.name.c_str(), c.calibrated.bf16_tflops);
  s += b;
  if (c.comm_gbps > 0) {
    std::snprintf(b, sizeof b,
                  "  communication: %.0f bytes per rank and step in %.1f ms = %.3f GB/s\n",
                  c.comm_bytes, 1e3 * c.comm_s, c.comm_gbps);
    s += b;
  }
  if (c.measured_parameters >= 0) {
    const ModelStates& p = c.planned_states;
    const bool exact = c.measured_parameters == p.parameters &&
                       c.measured_gradients == p.gradients && c.measured_optimizer == p.optimizer;
    s += str_cat("  model states (rank 0): measured ", c.measured_parameters, " + ",
                 c.measured_gradients, " + ", c.measured_optimizer, " bytes, planned ",
                 p.parameters, " + ", p.gradients, " + ", p.optimizer,
                 exact ? " (equal)" : " (DIFFERENT: the planner's accounting is off)", "\n");
    const double planned = double(c.planned_memory.activations + c.planned_memory.buffers);
    std::snprintf(
        b, sizeof b, "  activations (rank 0): measured %lld bytes, planned %.0f (%+.1f%%)\n",
        (long long)c.measured_activations, planned,
        c.measured_activations > 0 ? 100 * (planned / double(c.measured_activations) - 1) : 0.0);
    s += b;
  }
  if (c.save_stall_s >= 0) {
    std::snprintf(b, sizeof b, "  checkpoint saves: %.3f s stall (median)\n", c.save_stall_s);
    s += b;
  }
  if (c.restart_s >= 0) {
    std::snprintf(b, sizeof b, "  restarts: %.2f s to recover (median)\n", c.restart_s);
    s += b;
  }
  for (const std::string& n : c.notes) s += "  note: " + n + "\n";
  return s;
}

}  // namespace tessera::plan
