#pragma once
// Fused optimizer updates.

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"

namespace tessera::ops {

// One AdamW step in place on contiguous f32 param, m, v (same shape) with gradient grad
// (contiguous, same shape; f32, or the bf16/f16 of the compute parameters): decoupled weight
// decay, bias-corrected moments. When `rounded` is defined (a contiguous bf16 or f16 tensor of
// param's shape) the updated param is also written into it, rounded to nearest even, or
// stochastically (bf16 only) when args.stochastic_rounding: mixed precision's master -> compute
// copy in the same pass.
void adamw_step_(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                 const AdamWArgs& args, const Tensor& rounded = Tensor());

}  // namespace tessera::ops
