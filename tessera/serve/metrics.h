#pragma once
// The server's Prometheus metrics (text exposition format 0.0.4), named after vLLM's with the
// "tessera:" prefix in place of "vllm:", so dashboards built for vLLM need only the prefix
// changed:
//
//   tessera:time_to_first_token_seconds     histogram  arrival -> first token
//   tessera:time_per_output_token_seconds   histogram  mean gap between a request's tokens
//   tessera:e2e_request_latency_seconds     histogram  arrival -> finish
//   tessera:prompt_tokens_total             counter
//   tessera:generation_tokens_total         counter
//   tessera:request_success_total{finished_reason="stop|length|cancelled"}  counter
//   tessera:num_requests_running / _waiting gauge
//   tessera:kv_cache_usage_perc             gauge      used blocks / all blocks (vLLM's
//                                                      gpu_cache_usage_perc, on any device)
//   tessera:num_preemptions_total           counter
//
// Thread-safe: handlers and the engine thread record; /metrics renders.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tessera/serve/engine.h"

namespace tessera::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);  // ascending upper bounds; +Inf is added
  void observe(double value);
  // The metric's _bucket (cumulative), _sum and _count lines.
  std::string render(const std::string& name, const std::string& help) const;
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();
  // One finished request: its latencies in seconds (ttft < 0 when it produced no token).
  void record_request(double ttft, double e2e, int64_t completion_tokens, FinishReason reason);
  // The whole exposition, with the engine's counters and gauges.
  std::string render(const EngineStats& stats) const;

 private:
  mutable std::mutex mutex_;
  Histogram ttft_, tpot_, e2e_;
  std::map<std::string, int64_t> finished_;
};

}  // namespace tessera::serve
