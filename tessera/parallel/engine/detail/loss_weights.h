#pragma once
// Each micro-batch's weight in a step whose loss is the mean over the GLOBAL batch's counted
// targets (those that are not ignore_index). A rank trains its rows [R * M, T] as M
// micro-batches, each micro-batch's loss being the mean over its own counted targets; the step
// averages them with 1 / M and then over the D data-parallel ranks. Weighting micro-batch m by
//
//   w_m = count_m * M * D / global_count
//
// makes that average the global mean however the ignored targets fall. With no target ignored
// anywhere, w_m is exactly 1 (returned as 1.0, so callers skip the multiply and run the
// unweighted graph bit for bit); with no counted target anywhere, 0.

#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/parallel/comm/communicator.h"

namespace tessera::parallel {

// targets: this rank's integer [R * M, T]. One all-reduce (sum) of this rank's count over dp,
// in a tensor on `device` (the device dp's communicator carries).
std::vector<double> micro_batch_weights(const Tensor& targets, int microbatches,
                                        int64_t ignore_index, Communicator& dp, Device device);

}  // namespace tessera::parallel
