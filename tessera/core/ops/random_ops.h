#pragma once
// Dropout on the Philox stream.

#include <cstdint>

#include "tessera/core/tensor.h"

namespace tessera::ops {

// Zeroes each element with probability p and scales the rest by 1/(1-p). Element i's fate is
// decided by stream position offset + i of `seed`, so calling it again with the same key on
// the upstream gradient is its backward pass. p in [0, 1).
Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset);

}  // namespace tessera::ops
