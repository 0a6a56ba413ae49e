#pragma once
// Elementwise ops with numpy broadcasting. Binary ops promote dtypes (promote_types); a scalar
// operand takes the tensor's dtype. Activations: gelu is the tanh form used by GPT-2.

#include <utility>

#include "tessera/core/backend.h"
#include "tessera/core/tensor.h"

namespace tessera::ops {

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);

Tensor unary(UnaryOp op, const Tensor& x, double scalar = 0.0);
#define TESSERA_UNARY_OP(name) Tensor name(const Tensor& x);
#include "tessera/core/op_table.def"
Tensor pow(const Tensor& x, double exponent);
// gx for gy flowing back through op(x); y = op(x) (may be undefined for gelu, silu, relu,
// neg, log, pow).
Tensor unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy,
                      double scalar = 0.0);

// silu(gate) * up in one pass (the SwiGLU MLP's activation): gate and up of one shape and
// floating dtype, no broadcasting.
Tensor swiglu(const Tensor& gate, const Tensor& up);
// {ggate, gup} for gy flowing back through swiglu(gate, up).
std::pair<Tensor, Tensor> swiglu_backward(const Tensor& gate, const Tensor& up, const Tensor& gy);

// cond ? a : b, broadcasting all three; cond may have any dtype (nonzero is true).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// dst += src (src broadcast to dst's shape, cast to its dtype), in place.
void add_(const Tensor& dst, const Tensor& src);
// dst *= value, in place.
void mul_(const Tensor& dst, double value);

}  // namespace tessera::ops
