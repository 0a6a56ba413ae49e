#include "tessera/serve/metrics.h"

#include <algorithm>
#include <charconv>

#include "tessera/core/error.h"

namespace tessera::serve {

namespace {
// The shortest text that reads back as v (0.1, not 0.10000000000000001).
std::string number(double v) {
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  return std::string(buf, end);
}
}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  TESSERA_CHECK(std::is_sorted(bounds_.begin(), bounds_.end()),
                "Histogram: bucket bounds must ascend");
}

void Histogram::observe(double value) {
  const size_t i =
      size_t(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  ++counts_[i];
  sum_ += value;
  ++count_;
}

std::string Histogram::render(const std::string& name, const std::string& help) const {
  std::string out = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
  int64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out += name + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum " + number(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
  return out;
}

// vLLM's buckets, so that quantiles line up with its dashboards.
ServerMetrics::ServerMetrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
             10.0, 20.0, 40.0, 80.0}),
      tpot_({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
             10.0, 20.0, 40.0, 80.0}),
      e2e_({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
            240.0, 480.0, 960.0}) {
  for (const char* r : {"stop", "length", "cancelled"}) finished_[r] = 0;
}

void ServerMetrics::record_request(double ttft, double e2e, int64_t completion_tokens,
                                   FinishReason reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (ttft >= 0) ttft_.observe(ttft);
  if (ttft >= 0 && completion_tokens > 1)
    tpot_.observe((e2e - ttft) / double(completion_tokens - 1));
  e2e_.observe(e2e);
  ++finished_[finish_reason_name(reason)];
}

std::string ServerMetrics::render(const EngineStats& stats) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  auto scalar = [&out](const std::string& name, const char* type, const std::string& help,
                       const std::string& value) {
    out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
           value + "\n";
  };
  out += ttft_.render("tessera:time_to_first_token_seconds",
                      "Seconds from a request's arrival to its first generated token.");
  out += tpot_.render("tessera:time_per_output_token_seconds",
                      "Mean seconds between a request's generated tokens after the first.");
  out += e2e_.render("tessera:e2e_request_latency_seconds",
                     "Seconds from a request's arrival to its end.");
  scalar("tessera:prompt_tokens_total", "counter", "Prompt tokens of admitted requests.",
         std::to_string(stats.prompt_tokens));
  scalar("tessera:generation_tokens_total", "counter", "Generated tokens.",
         std::to_string(stats.generated_tokens));
  out +=
      "# HELP tessera:request_success_total Finished requests by finish reason.\n"
      "# TYPE tessera:request_success_total counter\n";
  for (const auto& [reason, n] : finished_)
    out += "tessera:request_success_total{finished_reason=\"" + reason + "\"} " +
           std::to_string(n) + "\n";
  scalar("tessera:num_requests_running", "gauge", "Requests in the running batch.",
         std::to_string(stats.running));
  scalar("tessera:num_requests_waiting", "gauge", "Requests queued for admission.",
         std::to_string(stats.waiting));
  scalar("tessera:kv_cache_usage_perc", "gauge", "Fraction of KV-cache blocks in use (0 to 1).",
         number(stats.kv_usage()));
  scalar("tessera:num_preemptions_total", "counter", "Sequences preempted to free KV blocks.",
         std::to_string(stats.preemptions));
  return out;
}

}  // namespace tessera::serve
