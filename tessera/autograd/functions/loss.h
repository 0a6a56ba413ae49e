#pragma once
// Differentiable fused cross-entropy: mean over targets that are not ignore_index.

#include "tessera/core/ops/loss.h"
#include "tessera/core/tensor.h"

namespace tessera {

Tensor cross_entropy(const Tensor& logits, const Tensor& targets,
                     int64_t ignore_index = ops::kIgnoreIndex);

}  // namespace tessera
