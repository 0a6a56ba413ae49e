#pragma once
// Differentiable dropout on the Philox stream.

#include <cstdint>

#include "tessera/core/random.h"
#include "tessera/core/tensor.h"

namespace tessera {

// Key (seed, offset): the mask depends on nothing else; see core/ops/random_ops.h.
Tensor dropout(const Tensor& x, double p, uint64_t seed, uint64_t offset);
// Draws the key from gen (advancing it by numel).
Tensor dropout(const Tensor& x, double p, Generator& gen);

}  // namespace tessera
