#pragma once
// Differentiable fused cross-entropy: mean over targets that are not ignore_index.
// num_classes (-1: all) counts only the first num_classes logit columns as classes, for a
// vocabulary padded to a round size; the padded columns get zero gradient (see ops/loss.h).

#include "tessera/core/ops/loss.h"
#include "tessera/core/tensor.h"

namespace tessera {

Tensor cross_entropy(const Tensor& logits, const Tensor& targets,
                     int64_t ignore_index = ops::kIgnoreIndex, int64_t num_classes = -1);

}  // namespace tessera
