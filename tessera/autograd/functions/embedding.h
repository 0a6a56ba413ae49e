#pragma once
// Differentiable embedding lookup (the weight gets a deterministic scatter-add gradient).

#include "tessera/core/tensor.h"

namespace tessera {

Tensor embedding(const Tensor& weight, const Tensor& ids);

}  // namespace tessera
