#include "tessera/train/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/version.h"
#include "tessera/nn/gpt.h"

namespace tessera::train {

double PhaseTimes::busy_compute_ms(double comm_ms) const {
  return std::max(0.0, step_ms - comm_ms);
}

namespace {

nlohmann::json phases_json(const PhaseTimes& p) {
  return {{"data_ms", p.data_ms},         {"forward_ms", p.forward_ms},
          {"backward_ms", p.backward_ms}, {"optimizer_ms", p.optimizer_ms},
          {"step_ms", p.step_ms}};
}

}  // namespace

nlohmann::json RankMetrics::to_json() const {
  return {{"comm_ms", comm_ms},
          {"phases", phases_json(phases)},
          {"comm_bytes", comm_bytes},
          {"param_bytes", parameter_bytes},
          {"grad_bytes", gradient_bytes},
          {"optim_bytes", optimizer_bytes},
          {"act_bytes", activation_bytes},
          {"device_live_bytes", device_live_bytes},
          {"device_peak_bytes", device_peak_bytes},
          {"host_optim_bytes", host_optimizer_bytes}};
}

nlohmann::json StepMetrics::to_json() const {
  nlohmann::json j = {{"step", step},
                      {"loss", loss},
                      {"lr", lr},
                      {"grad_norm", grad_norm},
                      {"ms", ms},
                      {"tokens_per_s", tokens_per_s},
                      {"mfu", mfu},
                      {"live_bytes", live_bytes},
                      {"peak_bytes", peak_bytes},
                      {"rss_bytes", rss_bytes}};
  if (val_loss) j["val_loss"] = *val_loss;
  if (snapshot_wait_ms) j["snapshot_wait_ms"] = *snapshot_wait_ms;
  j["time"] = time;
  nlohmann::json phase = phases_json(phases);
  phase["comm_ms"] = comm_ms;
  phase["checkpoint_ms"] = checkpoint_ms;
  j["phases"] = phase;
  if (!stragglers.empty()) j["stragglers"] = stragglers;
  j["precision"] = precision;
  if (loss_scale) {
    j["loss_scale"] = *loss_scale;
    j["skipped"] = skipped;
    j["skipped_steps"] = skipped_steps;
  }
  if (parallel) {
    j["bubble"] = parallel->bubble;
    nlohmann::json ranks = nlohmann::json::array();
    for (const RankMetrics& r : parallel->ranks) ranks.push_back(r.to_json());
    j["ranks"] = ranks;
  }
  return j;
}

std::string StepMetrics::console_line(int64_t max_steps) const {
  char buf[256];
  int width = int(std::to_string(max_steps).size());
  std::snprintf(buf, sizeof buf,
                "step %*lld/%lld | loss %.4f | lr %.2e | norm %.3f | %7.1f ms | %7.0f tok/s | "
                "MFU %5.1f%% | mem %.2f GiB (rss %.2f GiB)",
                width, (long long)step, (long long)max_steps, loss, lr, grad_norm, ms, tokens_per_s,
                100.0 * mfu, double(live_bytes) / (1 << 30), double(rss_bytes) / (1 << 30));
  std::string line = buf;
  if (precision != "fp32") line += " | " + precision;
  if (loss_scale) {
    std::snprintf(buf, sizeof buf, " scale %g | skipped %lld%s", *loss_scale,
                  (long long)skipped_steps, skipped ? " (this step: overflow)" : "");
    line += buf;
  }
  if (parallel && !parallel->ranks.empty()) {
    const RankMetrics& r = parallel->ranks.front();
    auto mib = [](int64_t bytes) { return double(bytes) / (1 << 20); };
    std::snprintf(buf, sizeof buf,
                  " | comm %.1f ms | bubble %.1f%% | rank0 params/grads/optim/act "
                  "%.2f/%.2f/%.2f/%.2f MiB",
                  r.comm_ms, 100.0 * parallel->bubble, mib(r.parameter_bytes),
                  mib(r.gradient_bytes), mib(r.optimizer_bytes), mib(r.activation_bytes));
    line += buf;
  }
  if (val_loss) {
    std::snprintf(buf, sizeof buf, " | val %.4f", *val_loss);
    line += buf;
  }
  return line;
}

std::vector<std::pair<std::string, double>> StepMetrics::scalars() const {
  std::vector<std::pair<std::string, double>> s = {
      {"loss/train", loss},
      {"optim/lr", lr},
      {"optim/grad_norm", grad_norm},
      {"perf/step_ms", ms},
      {"perf/tokens_per_s", tokens_per_s},
      {"perf/mfu", mfu},
      {"memory/live_bytes", double(live_bytes)},
      {"memory/peak_bytes", double(peak_bytes)},
      {"memory/rss_bytes", double(rss_bytes)}};
  if (val_loss) s.emplace_back("loss/val", *val_loss);
  s.insert(s.end(), {{"phase/data_ms", phases.data_ms},
                     {"phase/forward_ms", phases.forward_ms},
                     {"phase/backward_ms", phases.backward_ms},
                     {"phase/optimizer_ms", phases.optimizer_ms},
                     {"phase/comm_ms", comm_ms},
                     {"phase/checkpoint_ms", checkpoint_ms}});
  if (snapshot_wait_ms) s.emplace_back("checkpoint/snapshot_wait_ms", *snapshot_wait_ms);
  if (loss_scale) {
    s.emplace_back("fp16/loss_scale", *loss_scale);
    s.emplace_back("fp16/skipped_steps", double(skipped_steps));
  }
  if (parallel) {
    s.emplace_back("parallel/bubble", parallel->bubble);
    for (size_t r = 0; r < parallel->ranks.size(); ++r) {
      const std::string rank = "parallel/rank" + std::to_string(r) + "/";
      s.emplace_back(rank + "comm_ms", parallel->ranks[r].comm_ms);
      s.emplace_back(rank + "device_peak_bytes", double(parallel->ranks[r].device_peak_bytes));
    }
  }
  return s;
}

std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const int64_t s = int64_t(seconds + 0.5);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600),
                (long long)(s / 60 % 60), (long long)(s % 60));
  return buf;
}

std::string StepMetrics::progress_line(int64_t max_steps, double elapsed_s, double eta_s) const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "step %lld/%lld %.1f%% | loss %.4f | %.0f tok/s | elapsed %s | ETA %s",
                (long long)step, (long long)max_steps,
                max_steps > 0 ? 100.0 * double(step) / double(max_steps) : 0.0, loss, tokens_per_s,
                clock_text(elapsed_s).c_str(), clock_text(eta_s).c_str());
  return buf;
}

double flops_per_token(const nn::GPTConfig& config, int64_t seq_len) {
  double n = double(nn::GPT::count_parameters(config));
  if (config.position == nn::PositionKind::learned)
    n -= double(config.block_size) * double(config.n_embd);
  return 6.0 * n + 12.0 * double(config.n_layer) * double(config.n_embd) * double(seq_len);
}

namespace {

// The value of `key` in cpuinfo's first processor ("" if absent).
std::string cpuinfo_value(const std::string& cpuinfo, const std::string& key) {
  std::istringstream in(cpuinfo);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) break;  // the end of the first processor
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
    if (name != key) continue;
    const size_t value = line.find_first_not_of(" \t", colon + 1);
    return value == std::string::npos ? "" : line.substr(value);
  }
  return "";
}

}  // namespace

int cpu_fp32_flops_per_cycle(const std::string& cpuinfo, std::string* isa) {
  const std::string flags = " " + cpuinfo_value(cpuinfo, "flags") + " ";
  auto has = [&](const char* f) { return flags.find(str_cat(" ", f, " ")) != std::string::npos; };
  const bool amd = cpuinfo_value(cpuinfo, "vendor_id") == "AuthenticAMD";
  const int family = std::atoi(cpuinfo_value(cpuinfo, "cpu family").c_str());
  const int model = std::atoi(cpuinfo_value(cpuinfo, "model").c_str());
  auto row = [&](int per_cycle, const char* name) {
    if (isa) *isa = name;
    return per_cycle;
  };
  if (has("avx512f")) {
    if (amd && family == 25) return row(32, "AVX-512 on Zen 4's two 256-bit FMA pipes");
    return row(64, "AVX-512 FMA, two 512-bit pipes");
  }
  if (has("avx2") && has("fma")) {
    if (amd && family == 23 && model < 0x30) return row(16, "AVX2 on Zen's two 128-bit FMA pipes");
    return row(32, "AVX2 FMA, two 256-bit pipes");
  }
  return row(8, "SSE, no FMA");
}

double cpu_peak_gflops(int threads, std::string* description) {
  std::ifstream in("/proc/cpuinfo");
  std::stringstream text;
  text << in.rdbuf();
  const std::string cpuinfo = text.str();
  double mhz = std::atof(cpuinfo_value(cpuinfo, "cpu MHz").c_str());
  std::string isa;
  const int per_cycle = cpu_fp32_flops_per_cycle(cpuinfo, &isa);
  if (mhz <= 0) mhz = 2000;  // no cpuinfo: say so below
  double peak = threads * mhz / 1000.0 * per_cycle;
  if (description) {
    std::ostringstream os;
    os.precision(3);
    os << peak << " GFLOP/s (" << threads << " cores x " << mhz / 1000.0 << " GHz x " << per_cycle
       << " fp32 FLOP/cycle, " << isa << ")";
    *description = os.str();
  }
  return peak;
}

int64_t process_rss_bytes() {
  std::ifstream in("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  in >> pages >> resident;
  return resident * int64_t(::sysconf(_SC_PAGESIZE));
}

MetricsLog::MetricsLog(const std::string& path) : path_(path), out_(path, std::ios::app) {
  TESSERA_CHECK(out_.good(), "cannot open the metrics log ", path, " for appending");
}

void MetricsLog::append(const nlohmann::json& record) {
  nlohmann::json line = record;
  line["metrics_version"] = kMetricsVersion;
  out_ << line.dump() << '\n';
  out_.flush();
  TESSERA_CHECK(out_.good(), "writing the metrics log ", path_, " failed");
}

void MetricsLog::truncate_after(const std::string& path, int64_t step) {
  if (!std::filesystem::exists(path)) return;
  std::istringstream in(read_text_file(path));
  std::string kept, line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    // A torn last line (a crash mid-write) or a later step is dropped.
    if (j.is_discarded() || !j.contains("step") || !j["step"].is_number_integer()) continue;
    if (j.contains("metrics_version")) {
      const nlohmann::json& v = j["metrics_version"];
      check_format_version(str_cat(path, " line ", n, " 'metrics_version'"), "tessera-metrics",
                           v.is_number_integer() ? std::optional(v.get<int64_t>()) : std::nullopt,
                           v.dump(), kMetricsVersion);
    }
    if (j["step"].get<int64_t>() > step) continue;
    kept += line + '\n';
  }
  write_file_atomic(path, kept);
}

}  // namespace tessera::train
