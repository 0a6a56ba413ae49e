#include "tessera/train/preflight.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <sstream>
#include <thread>

#include "tessera/core/backend.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/matmul.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/random.h"

namespace tessera::train {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kHostChars = 64;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

}  // namespace

PreflightReport run_preflight(parallel::Communicator& world, Device device,
                              const PreflightOptions& o) {
  TESSERA_CHECK(o.matmul_size > 0 && o.repeats > 0 && o.allreduce_floats > 0 && o.slow_factor > 1,
                "preflight: sizes and repeats must be positive and slow_factor above 1");
  Backend& backend = backend_for(device);
  Generator gen(1234);
  const int64_t n = o.matmul_size;
  const Tensor a = ops::to(randn({n, n}, gen), device), b = ops::to(randn({n, n}, gen), device);
  Tensor c = ops::matmul(a, b);  // warm-up: first-call costs (allocation, kernels)
  backend.synchronize();
  // The fastest of a few trials: a rank descheduled once (a shared node, a neighbour's burst)
  // is not slow; one that is slow every time is.
  double compute_ms = 0;
  for (int trial = 0; trial < o.trials; ++trial) {
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < o.repeats; ++i) c = ops::matmul(a, c);
    backend.synchronize();
    if (o.planted_delay_ms > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.planted_delay_ms));
    const double ms = ms_since(t0);
    compute_ms = trial == 0 ? ms : std::min(compute_ms, ms);
  }

  const Tensor x = ops::to(ones({o.allreduce_floats}), device);
  world.barrier();
  const Clock::time_point t1 = Clock::now();
  world.all_reduce(x);
  backend.synchronize();
  const double allreduce_ms = ms_since(t1);

  // Every rank's two times and host name, in rank order.
  const int size = world.size();
  Tensor times = from_vector<double>({compute_ms, allreduce_ms}, Shape{2});
  Tensor all_times = zeros({2 * int64_t(size)}, DType::f64);
  char host[kHostChars] = {};
  if (::gethostname(host, kHostChars - 1) != 0) std::strcpy(host, "?");
  std::vector<int32_t> host_codes(kHostChars);
  for (int i = 0; i < kHostChars; ++i) host_codes[size_t(i)] = static_cast<unsigned char>(host[i]);
  Tensor hosts = from_vector<int32_t>(host_codes, Shape{kHostChars});
  Tensor all_hosts = zeros({int64_t(kHostChars) * size}, DType::i32);
  world.all_gather(times, all_times);
  world.all_gather(hosts, all_hosts);

  PreflightReport report;
  const double* t = all_times.data<double>();
  const int32_t* h = all_hosts.data<int32_t>();
  std::vector<double> computes;
  for (int r = 0; r < size; ++r) {
    PreflightRank pr;
    pr.rank = r;
    for (int i = 0; i < kHostChars && h[r * kHostChars + i] != 0; ++i)
      pr.host += char(h[r * kHostChars + i]);
    pr.compute_ms = t[2 * r];
    pr.allreduce_ms = t[2 * r + 1];
    computes.push_back(pr.compute_ms);
    report.ranks.push_back(pr);
  }
  report.median_compute_ms = median(computes);
  // Each rank against the median of the others: with two ranks the median of all would sit
  // half-way to the slow one, which could then never be twice it.
  for (PreflightRank& r : report.ranks) {
    std::vector<double> others;
    for (const PreflightRank& q : report.ranks)
      if (q.rank != r.rank) others.push_back(q.compute_ms);
    if (others.empty()) continue;
    r.vs_others = r.compute_ms / std::max(median(others), 1e-9);
    if (r.vs_others > o.slow_factor) report.slow.push_back(r.rank);
  }
  return report;
}

std::string PreflightReport::describe(double slow_factor) const {
  double allreduce = 0;
  for (const PreflightRank& r : ranks) allreduce = std::max(allreduce, r.allreduce_ms);
  std::ostringstream os;
  os << "preflight: " << ranks.size() << " rank" << (ranks.size() == 1 ? "" : "s")
     << ", compute median " << fixed(median_compute_ms, 1) << " ms, all-reduce "
     << fixed(allreduce, 2) << " ms; "
     << (slow.empty() ? "no rank slower than " + fixed(slow_factor, 1) + "x the median of the others"
                      : std::to_string(slow.size()) + " slow")
     << "\n";
  for (int s : slow) {
    const PreflightRank& r = ranks[size_t(s)];
    os << "preflight: rank " << r.rank << " on " << r.host << " computed in "
       << fixed(r.compute_ms, 1) << " ms, " << fixed(r.vs_others, 1)
       << "x the median of the others: a throttled or shared device? To leave the host out, resubmit with "
       << "srun --exclude=" << r.host << " (or without it in mpiexec's host list)\n";
  }
  return os.str();
}

nlohmann::json PreflightReport::to_json() const {
  nlohmann::json j = {{"median_compute_ms", median_compute_ms}, {"slow", slow}};
  for (const PreflightRank& r : ranks)
    j["ranks"].push_back({{"rank", r.rank},
                          {"host", r.host},
                          {"compute_ms", r.compute_ms},
                          {"vs_others", r.vs_others},
                          {"allreduce_ms", r.allreduce_ms}});
  return j;
}

}  // namespace tessera::train
