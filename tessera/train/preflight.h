#pragma once
// The pre-flight probe: before training, every rank times a small compute on its device and
// one all-reduce, and the ranks compare. A rank much slower than its peers (a throttled or
// shared GPU, a busy host) is named with its host, so that the job can be resubmitted without
// it: excluding a host is the launcher's job (`srun --exclude=HOST`, or leaving it out of
// mpiexec's host list). `tessera train` runs it at startup under `tessera launch`, so at every
// restart too (docs/resilience.md).

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/device.h"
#include "tessera/parallel/comm/communicator.h"

namespace tessera::train {

struct PreflightOptions {
  int matmul_size = 256;     // n of the n x n x n matmuls
  // Matmuls per trial (after one untimed warm-up): about 25 ms on one CPU core, long against
  // a scheduler's time slice. With 8 (3 ms) a healthy rank of an oversubscribed node was
  // flagged at 2.3x its peer even as the fastest of three trials.
  int repeats = 64;
  int trials = 3;            // a rank's time is its fastest trial's
  int64_t allreduce_floats = 1 << 18;  // 1 MiB of f32
  // A rank is slow when its compute takes more than this many times the median of the other
  // ranks'.
  double slow_factor = 2.0;
  double planted_delay_ms = 0;  // tests only: added to each of this rank's trials
};

struct PreflightRank {
  int rank = 0;
  std::string host;
  double compute_ms = 0, allreduce_ms = 0;
  double vs_others = 1;  // compute_ms over the median of the other ranks'
};

struct PreflightReport {
  std::vector<PreflightRank> ranks;  // every rank, in rank order (the same on every rank)
  double median_compute_ms = 0;  // over every rank
  std::vector<int> slow;  // ranks past slow_factor x the median of the others
  // One summary line, then one line per slow rank naming its host and how to exclude it.
  std::string describe(double slow_factor) const;
  nlohmann::json to_json() const;
};

// Collective over world; `device` is where the compute runs.
PreflightReport run_preflight(parallel::Communicator& world, Device device,
                              const PreflightOptions& options = {});

}  // namespace tessera::train
