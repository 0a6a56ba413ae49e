// Front end of causal attention and RoPE: validation, layouts and output allocation.
//
// Layout rules:
// - The backend reads rows of D contiguous elements, so q, k, v, out and gout with another
//   stride in D are copied once (O(T * D), never O(T^2)).
// - out and the gradients are [B, H, T, D] tensors stored as [B, T, H, D]. Models build q, k,
//   v as transpose(1, 2) of a [B, T, H, D] projection, so in that order the way back (merging
//   heads of out into [B, T, H * D], or handing gq to the transpose's backward) is a free view.
// - lse is kept in the dtype the kernel computes in: f32 for f32, bf16 and f16 inputs, f64 for
//   f64 inputs. With f64 the backward then recomputes exactly the softmax of the forward, which
//   gradcheck needs (an f32 lse would put a 1e-7 relative error into every gradient).

#include "tessera/core/ops/attention.h"

#include <cmath>

#include "tessera/core/detail/op_scope.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/detail/op_utils.h"

namespace tessera::ops {

using detail::backend;
using detail::check_defined;

namespace {

struct AttentionDims {
  int64_t B, H, Hkv, Tq, Tk, D;
};

AttentionDims check_attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v) {
  check_defined(op, q, "q");
  check_defined(op, k, "k");
  check_defined(op, v, "v");
  detail::check_same_device(op, {&q, &k, &v});
  detail::check_floating(op, q, "q");
  detail::check_dim(op, q, 4, "q [B, H, Tq, D]");
  detail::check_dim(op, k, 4, "k [B, Hkv, Tk, D]");
  detail::check_dim(op, v, 4, "v [B, Hkv, Tk, D]");
  TESSERA_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(), op,
                ": q, k and v must share one dtype, got q ", q.describe(), ", k ", k.describe(),
                ", v ", v.describe());
  TESSERA_CHECK(k.shape() == v.shape(), op, ": k ", k.describe(), " and v ", v.describe(),
                " must have the same shape");
  AttentionDims d{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3)};
  TESSERA_CHECK(k.size(0) == d.B && k.size(3) == d.D, op, ": k and v must be [B, Hkv, Tk, D] ",
                "with B = ", d.B, " and D = ", d.D, " to match q ", q.describe(), ", got k ",
                k.describe());
  TESSERA_CHECK(d.D > 0, op, ": the head dimension D of q ", q.describe(), " must be positive");
  TESSERA_CHECK(d.Hkv > 0 && d.H % d.Hkv == 0, op, ": the ", d.H, " query heads of q ",
                q.describe(), " must be a multiple of the ", d.Hkv, " kv heads of k ",
                k.describe());
  TESSERA_CHECK(d.Tq <= d.Tk, op, ": q ", q.describe(), " has ", d.Tq, " positions but k ",
                k.describe(), " only ", d.Tk,
                "; queries sit at the end of the key sequence, so Tq <= Tk");
  return d;
}

// The backend reads rows with unit stride in D; other layouts are copied.
Tensor unit_stride_d(const Tensor& x) {
  return x.size(3) <= 1 || x.stride(3) == 1 ? x : contiguous(x);
}

DType lse_dtype(DType dtype) {
  return dtype == DType::f64 ? DType::f64 : DType::f32;
}

// [B, H, T, D] stored as [B, T, H, D].
Tensor empty_heads_last(int64_t B, int64_t H, int64_t T, int64_t D, DType dtype, Device device) {
  return transpose(empty(Shape{B, T, H, D}, dtype, device), 1, 2);
}

double resolve_scale(double scale, int64_t D) {
  return scale > 0 ? scale : 1.0 / std::sqrt(double(D));
}

}  // namespace

AttentionOutput attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale) {
  const OpScope scope("attention_forward");
  const char* op = "attention";
  AttentionDims d = check_attention(op, q, k, v);
  AttentionOutput r;
  r.out = empty_heads_last(d.B, d.H, d.Tq, d.D, q.dtype(), q.device());
  r.lse = empty(Shape{d.B, d.H, d.Tq}, lse_dtype(q.dtype()), q.device());
  if (r.out.numel() > 0)
    backend(q).attention_forward(unit_stride_d(q), unit_stride_d(k), unit_stride_d(v),
                                 resolve_scale(scale, d.D), r.out, r.lse);
  return r;
}

AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, const Tensor& gout,
                                  double scale) {
  const OpScope scope("attention_backward");
  const char* op = "attention backward";
  AttentionDims d = check_attention(op, q, k, v);
  check_defined(op, out, "out");
  check_defined(op, lse, "lse");
  check_defined(op, gout, "gradient");
  detail::check_same_device(op, {&q, &out, &lse, &gout});
  detail::check_shape(op, out, q.shape(), "out");
  detail::check_dtype(op, out, q.dtype(), "out");
  detail::check_shape(op, lse, Shape{d.B, d.H, d.Tq}, "lse");
  detail::check_dtype(op, lse, lse_dtype(q.dtype()), "lse");
  detail::check_shape(op, gout, q.shape(), "gradient");
  detail::check_floating(op, gout, "gradient");
  AttentionGrads g;
  g.gq = empty_heads_last(d.B, d.H, d.Tq, d.D, q.dtype(), q.device());
  g.gk = empty_heads_last(d.B, d.Hkv, d.Tk, d.D, q.dtype(), q.device());
  g.gv = empty_heads_last(d.B, d.Hkv, d.Tk, d.D, q.dtype(), q.device());
  if (g.gq.numel() == 0) {
    // No query sees any key: the keys and values get no gradient.
    zero_(g.gk);
    zero_(g.gv);
    return g;
  }
  backend(q).attention_backward(
      unit_stride_d(q), unit_stride_d(k), unit_stride_d(v), unit_stride_d(out), contiguous(lse),
      unit_stride_d(cast(gout, q.dtype())), resolve_scale(scale, d.D), g.gq, g.gk, g.gv);
  return g;
}

Tensor rope(const Tensor& x, int64_t pos_offset, double theta, bool inverse) {
  const OpScope scope("rope");
  const char* op = inverse ? "rope (inverse)" : "rope";
  check_defined(op, x);
  detail::check_floating(op, x);
  detail::check_dim(op, x, 4, "input [B, T, H, D]");
  TESSERA_CHECK(x.size(3) % 2 == 0, op, ": the head dimension D of ", x.describe(),
                " must be even (pairs (d, d + D/2) are rotated)");
  TESSERA_CHECK(theta > 0, op, ": theta must be positive, got ", theta, " for ", x.describe());
  TESSERA_CHECK(pos_offset >= 0, op, ": pos_offset must be non-negative, got ", pos_offset, " for ",
                x.describe());
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (out.numel() > 0) backend(x).rope(unit_stride_d(x), out, pos_offset, theta, inverse);
  return out;
}

}  // namespace tessera::ops
