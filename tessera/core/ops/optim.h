#pragma once
// Fused optimizer updates.

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"

namespace tessera::ops {

// One AdamW step in place on contiguous f32 param, m, v (same shape) with gradient grad
// (contiguous, same shape, f32): decoupled weight decay, bias-corrected moments.
void adamw_step_(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                 const AdamWArgs& args);

}  // namespace tessera::ops
