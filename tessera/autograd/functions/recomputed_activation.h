#pragma once
// A linear layer over an activation it does not keep: the input of selective recomputation
// (nn/recompute.h). The forward pass applies the activation, multiplies and drops the
// activation's output; the backward pass applies it again from the saved pre-activation. Same
// ops on the same operands as the activation followed by linear(), so the values and gradients
// are bit-identical to that pair's; what changes is what stays alive between the passes.

#include "tessera/core/tensor.h"

namespace tessera {

// linear(gelu(pre), weight, bias), saving pre (not gelu(pre)): pre [..., in], weight [out, in],
// bias [out] or undefined.
Tensor linear_recomputing_gelu(const Tensor& pre, const Tensor& weight,
                               const Tensor& bias = Tensor());

// linear(silu(gate) * up, weight, bias), saving gate and up (not silu(gate) or the product).
Tensor linear_recomputing_swiglu(const Tensor& gate, const Tensor& up, const Tensor& weight,
                                 const Tensor& bias = Tensor());

}  // namespace tessera
