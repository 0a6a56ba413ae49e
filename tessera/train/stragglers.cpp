#include "tessera/train/stragglers.h"

#include <algorithm>
#include <cstdio>

#include "tessera/core/error.h"

namespace tessera::train {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t k = v.size() / 2;
  return v.size() % 2 == 1 ? v[k] : 0.5 * (v[k - 1] + v[k]);
}

std::string StragglerFlag::describe(int consecutive) const {
  char text[256];
  std::snprintf(text, sizeof text,
                "straggler: rank %d is slow in %s: %.1f ms/step against a median of %.1f ms "
                "(1.5x or more for %d intervals), steps %lld-%lld",
                rank, phase.c_str(), busy_ms, median_ms, consecutive, (long long)first_step,
                (long long)last_step);
  return text;
}

StragglerDetector::StragglerDetector(StragglerOptions options) : options_(options) {
  TESSERA_CHECK(options_.interval >= 1 && options_.consecutive >= 1 && options_.factor > 1,
                "straggler detector: interval and consecutive must be >= 1 and factor > 1");
}

std::vector<StragglerFlag> StragglerDetector::add(int64_t step,
                                                  const std::vector<RankMetrics>& ranks) {
  const size_t n = ranks.size();
  if (data_ms_.size() != n) {
    data_ms_.assign(n, 0);
    compute_ms_.assign(n, 0);
    data_streak_.assign(n, 0);
    compute_streak_.assign(n, 0);
    steps_in_interval_ = 0;
  }
  if (steps_in_interval_ == 0) first_step_ = step;
  for (size_t r = 0; r < n; ++r) {
    data_ms_[r] += ranks[r].phases.data_ms;
    compute_ms_[r] += ranks[r].phases.busy_compute_ms(ranks[r].comm_ms);
  }
  std::vector<StragglerFlag> flags;
  if (++steps_in_interval_ < options_.interval) return flags;

  const double steps = double(steps_in_interval_);
  auto judge = [&](const char* phase, std::vector<double>& sums, std::vector<int>& streak) {
    std::vector<double> per_step(n);
    for (size_t r = 0; r < n; ++r) per_step[r] = sums[r] / steps;
    const double median = median_of(per_step);
    for (size_t r = 0; r < n; ++r) {
      const bool suspect = per_step[r] >= options_.factor * median &&
                           per_step[r] - median >= options_.min_excess_ms;
      streak[r] = suspect ? streak[r] + 1 : 0;
      // Flagged when the streak reaches `consecutive`; a longer one is not flagged again.
      if (suspect && streak[r] == options_.consecutive)
        flags.push_back({int(r), phase, per_step[r], median, first_step_, step});
    }
    std::fill(sums.begin(), sums.end(), 0.0);
  };
  if (n >= 2) {
    judge("data", data_ms_, data_streak_);
    judge("compute", compute_ms_, compute_streak_);
  }
  steps_in_interval_ = 0;
  return flags;
}

}  // namespace tessera::train
