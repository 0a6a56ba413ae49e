#pragma once
// StragglerDetector: which rank holds a synchronous job back, and in which phase.
//
// In synchronous training every rank's step takes the same wall time: the fast ranks wait for
// the slow one inside the collectives. So the detector compares what each rank spent itself,
// its busy time per phase: data loading (data_ms), and compute (the engine's step less the
// communication it blocked in). Over each interval of `interval` steps, a rank is a suspect in
// a phase when its busy time there is at least `factor` x the median of the ranks' and exceeds
// it by at least `min_excess_ms` per step. A rank is flagged once it has been a suspect in
// `consecutive` intervals in a row, and again only after an interval clear of suspicion.
//
// Choices: factor 1.5 (the issue's); consecutive 2, so that one interval's noise (a rank
// descheduled on a shared machine) is never flagged while a real delay is flagged at the end
// of its second full interval, within 3 intervals of its start; min_excess_ms 2, because the
// phases of a small model take microseconds, where 1.5x is noise, and a straggler worth a
// person's attention costs milliseconds a step.

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/train/metrics.h"

namespace tessera::train {

struct StragglerOptions {
  int64_t interval = 10;  // steps
  int consecutive = 2;
  double factor = 1.5;
  double min_excess_ms = 2.0;
};

struct StragglerFlag {
  int rank = 0;
  std::string phase;            // "data" or "compute"
  double busy_ms = 0;           // the rank's, per step over the interval
  double median_ms = 0;         // the ranks' median, per step
  int64_t first_step = 0, last_step = 0;  // the interval
  // "straggler: rank 1 is slow in data: 31.2 ms/step against a median of 0.0 ms (1.5x or more
  // for 2 intervals), steps 11-20"
  std::string describe(int consecutive) const;
};

class StragglerDetector {
 public:
  explicit StragglerDetector(StragglerOptions options = {});
  // One step's figures of every rank (rank 0 first). Returns the flags raised at the end of
  // an interval (empty otherwise).
  std::vector<StragglerFlag> add(int64_t step, const std::vector<RankMetrics>& ranks);
  const StragglerOptions& options() const { return options_; }

 private:
  StragglerOptions options_;
  int64_t steps_in_interval_ = 0, first_step_ = 0;
  std::vector<double> data_ms_, compute_ms_;   // per rank, summed over the interval
  std::vector<int> data_streak_, compute_streak_;  // per rank: suspect intervals in a row
};

// The median of `v` (the mean of the middle two for an even count); 0 when empty.
double median_of(std::vector<double> v);

}  // namespace tessera::train
