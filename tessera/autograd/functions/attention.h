#pragma once
// Differentiable causal attention (flash-style, O(T) memory per head) and RoPE.

#include "tessera/core/tensor.h"

namespace tessera {

// q [B, H, Tq, D], k and v [B, Hkv, Tk, D]; see core/ops/attention.h. scale <= 0 means
// 1/sqrt(D). Returns [B, H, Tq, D].
Tensor causal_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale = 0.0);
// x [B, T, H, D] rotated at positions pos_offset + t.
Tensor rope(const Tensor& x, int64_t pos_offset = 0, double theta = 10000.0);

}  // namespace tessera
