#pragma once
// Embedding lookup (a row gather) and its scatter-add backward.

#include "tessera/core/tensor.h"

namespace tessera::ops {

// weight [V, C], ids i32/i64 of any shape -> [*ids.shape, C]. An id outside [0, V) throws an
// Error naming its position and value.
Tensor embedding(const Tensor& weight, const Tensor& ids);
// The [V, C] gradient of the weight: rows of gy summed into the rows ids name.
Tensor embedding_backward(const Tensor& ids, const Tensor& gy, int64_t num_embeddings);

}  // namespace tessera::ops
