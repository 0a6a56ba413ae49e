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

Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor gelu(const Tensor& x);  // tanh approximation (GPT-2)
Tensor silu(const Tensor& x);
Tensor relu(const Tensor& x);
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
