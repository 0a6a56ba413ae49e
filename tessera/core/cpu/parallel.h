#pragma once
// CPU threading. Work is split into chunks whose boundaries depend only on the problem size
// (never on the thread count), so any reduction done per chunk and combined in chunk order
// gives the same bits with 1 thread or 16.

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "tessera/core/threads.h"

namespace tessera {

namespace cpu {

// Calls f(begin, end) over [0, n) in pieces of about `grain` items, in parallel when there is
// more than one piece. f must be safe to run concurrently on disjoint ranges.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t pieces = (n + grain - 1) / grain;
  if (pieces == 1 || omp_in_parallel()) {
    f(int64_t(0), n);
    return;
  }
  int threads = int(std::min<int64_t>(pieces, omp_get_max_threads()));
#pragma omp parallel num_threads(threads)
  {
    int t = omp_get_thread_num(), nt = omp_get_num_threads();
    int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    if (begin < end) f(begin, end);
  }
}

// Fixed-size chunks for reductions that must not depend on the thread count.
inline constexpr int64_t kReduceChunk = 1 << 14;

}  // namespace cpu
}  // namespace tessera
