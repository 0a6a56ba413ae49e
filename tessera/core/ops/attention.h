#pragma once
// Causal scaled-dot-product attention (fused, tiled, online softmax: memory per head grows as
// O(T), never O(T^2)) and rotary position embeddings.

#include "tessera/core/tensor.h"

namespace tessera::ops {

struct AttentionOutput {
  Tensor out;  // [B, H, Tq, D]; stored as [B, Tq, H, D] so merging heads is a free view
  Tensor lse;  // [B, H, Tq]: f32, or f64 for f64 inputs (so gradcheck stays exact)
};
// q [B, H, Tq, D]; k, v [B, Hkv, Tk, D] with H % Hkv == 0 (grouped-query attention) and
// Tq <= Tk: query i sits at position Tk - Tq + i and sees keys 0..Tk - Tq + i. scale <= 0
// means 1/sqrt(D).
AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  double scale = 0.0);

struct AttentionGrads {
  Tensor gq, gk, gv;
};
AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, const Tensor& gout,
                                  double scale = 0.0);

// Rotary embedding of x [B, T, H, D] (D even) at positions pos_offset + t, rotating the pairs
// (d, d + D/2) (the Hugging Face / GPT-NeoX convention). inverse = true undoes it, which is
// also its backward pass.
Tensor rope(const Tensor& x, int64_t pos_offset = 0, double theta = 10000.0, bool inverse = false);

}  // namespace tessera::ops
