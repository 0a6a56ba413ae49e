#pragma once
// Activation checkpointing: run a segment without keeping its intermediates, and recompute it
// during backward. The recompute sees the same random state (the default generator and any
// generators passed), so dropout masks match and the gradients equal those of an
// uncheckpointed run.

#include <functional>
#include <vector>

#include "tessera/core/random.h"
#include "tessera/core/tensor.h"

namespace tessera::autograd {

using SegmentFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Returns fn(inputs). Parameters that fn uses from its closure receive their gradients during
// the recompute, as they would without checkpointing.
std::vector<Tensor> checkpoint(const SegmentFn& fn, const std::vector<Tensor>& inputs,
                               const std::vector<Generator*>& generators = {});

}  // namespace tessera::autograd
