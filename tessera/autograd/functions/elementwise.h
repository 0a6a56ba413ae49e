#pragma once
// Differentiable elementwise ops (broadcasting, dtype promotion as in ops/elementwise.h) and
// the arithmetic operators.

#include "tessera/core/tensor.h"

namespace tessera {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);

// neg, exp, log, sqrt, rsqrt, tanh, gelu (the tanh form of GPT-2), silu, relu.
#define TESSERA_UNARY_OP(name) Tensor name(const Tensor& x);
#include "tessera/core/op_table.def"
Tensor pow(const Tensor& x, double exponent);
// silu(gate) * up in one pass, forward and backward (ops/elementwise.h).
Tensor swiglu(const Tensor& gate, const Tensor& up);
// cond ? a : b (cond is not differentiated).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

inline Tensor operator+(const Tensor& a, const Tensor& b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, const Tensor& b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, const Tensor& b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, const Tensor& b) {
  return div(a, b);
}
inline Tensor operator+(const Tensor& a, double b) {
  return add(a, b);
}
inline Tensor operator-(const Tensor& a, double b) {
  return sub(a, b);
}
inline Tensor operator*(const Tensor& a, double b) {
  return mul(a, b);
}
inline Tensor operator/(const Tensor& a, double b) {
  return div(a, b);
}
inline Tensor operator+(double a, const Tensor& b) {
  return add(b, a);
}
inline Tensor operator-(double a, const Tensor& b) {
  return add(neg(b), a);
}
inline Tensor operator*(double a, const Tensor& b) {
  return mul(b, a);
}
inline Tensor operator/(double a, const Tensor& b) {
  return mul(pow(b, -1.0), a);
}
inline Tensor operator-(const Tensor& x) {
  return neg(x);
}

}  // namespace tessera
