#pragma once
// LayerNorm and RMSNorm over the last dim, with fused backward passes.
//
// Dtypes: y, gx, gw and gb have x's dtype; weight/bias (any floating dtype) are cast to it.
// The per-row statistics are computed and saved in f32 for f32/bf16/f16 inputs and in f64 for
// f64 inputs, so an f64 input (gradcheck) is computed in f64 end to end.

#include "tessera/core/tensor.h"

namespace tessera::ops {

struct LayerNormOutput {
  Tensor y;     // shaped like x
  Tensor mean;  // f32 [rows] (f64 for f64 x)
  Tensor rstd;  // f32 [rows] (f64 for f64 x)
};
// weight and bias are [C] (bias may be undefined), C = x.size(-1).
LayerNormOutput layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  double eps = 1e-5);

struct NormGrads {
  Tensor gx;
  Tensor gw;  // undefined unless asked for
  Tensor gb;  // undefined unless asked for (and always for rmsnorm)
};
NormGrads layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                             const Tensor& rstd, const Tensor& gy, bool need_gw, bool need_gb);

struct RMSNormOutput {
  Tensor y;
  Tensor rstd;  // f32 [rows] (f64 for f64 x)
};
RMSNormOutput rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps = 1e-6);
NormGrads rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                           const Tensor& gy, bool need_gw);

}  // namespace tessera::ops
