#pragma once
// The Backend interface: what a device must do for the op front end (ops/).
//
// The front end has already validated inputs, promoted dtypes, broadcast operands (as stride-0
// views) and allocated outputs, so a backend sees well-formed tensors on its own device and
// only computes. Each method documents the layouts it may receive. A backend that lacks an op
// inherits the default, which throws an Error naming the op and the device.

#include <cstdint>
#include <vector>

#include "tessera/core/allocator.h"
#include "tessera/core/tensor.h"

namespace tessera {

enum class UnaryOp : uint8_t { neg, exp, log, sqrt, rsqrt, tanh, gelu, silu, relu, pow_scalar };
enum class BinaryOp : uint8_t { add, sub, mul, div };
enum class ReduceOp : uint8_t { sum, mean, max };

const char* unary_op_name(UnaryOp op);
const char* binary_op_name(BinaryOp op);
const char* reduce_op_name(ReduceOp op);

struct MatmulArgs {
  bool trans_a = false;  // use a's last two dims transposed
  bool trans_b = false;
  float alpha = 1.0f;  // out = alpha * op(a) op(b) + beta * out (+ bias)
  float beta = 0.0f;   // beta = 1 accumulates into out (gradient accumulation)
};

struct AdamWArgs {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;         // 1-based, for bias correction
  float grad_scale = 1.0f;  // grads are multiplied by this first (unscaling, clipping)
  // Rounding of the updated param into adamw_step's optional low-precision copy: to nearest
  // even, or (bf16 only) stochastically with 16 Philox bits per element keyed by
  // (rounding_seed, step, element index), the same bits on every backend.
  bool stochastic_rounding = false;
  uint64_t rounding_seed = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual Allocator& allocator() = 0;
  // Waits for queued work on this device (no-op on the CPU).
  virtual void synchronize() {}

  // ---- memory and creation ----
  // dst[i] = cast(src[i]); both on this device, same shape, any strides, any dtypes.
  virtual void copy(const Tensor& src, const Tensor& dst);
  // Copies between this device and the host: exactly one of src, dst is on the CPU; both
  // are contiguous with the same dtype and numel.
  virtual void copy_host(const Tensor& src, const Tensor& dst);
  virtual void fill(const Tensor& dst, double value);
  virtual void arange(const Tensor& dst, double start, double step);  // dst contiguous, 1-d
  // Philox streams keyed by (seed, offset): element i of dst draws from counter offset + i, so
  // values do not depend on thread count or on how the tensor is split.
  virtual void random_uniform(const Tensor& dst, double lo, double hi, uint64_t seed,
                              uint64_t offset);
  virtual void random_normal(const Tensor& dst, double mean, double std, uint64_t seed,
                             uint64_t offset);

  // ---- elementwise: inputs are broadcast views of out's shape (any strides, stride 0 where
  // broadcast) with out's dtype; out may be the same tensor as an input (in-place ops). ----
  virtual void unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar);
  // gx = d op(x) / dx * gy. `y` is op(x) when the op's derivative is cheaper from it (exp,
  // tanh, sqrt, rsqrt); it may be undefined for the others.
  virtual void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy,
                              const Tensor& gx, double scalar);
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
  // out = cond != 0 ? a : b; cond may have any dtype.
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out);

  // ---- reductions: x is contiguous [outer, r, inner], out is [outer, inner] ----
  // For max, `indices` (i64 [outer, inner]) receives the argmax along r.
  virtual void reduce(ReduceOp op, const Tensor& x, const Tensor& out, const Tensor& indices);
  // gx[o, indices[o, i], i] = gy[o, i]; gx is zero elsewhere. gx is [outer, r, inner].
  virtual void max_backward(const Tensor& indices, const Tensor& gy, const Tensor& gx);
  // Row-wise over contiguous [rows, n]. `log` selects log-softmax.
  virtual void softmax(const Tensor& x, const Tensor& out, bool log);
  virtual void softmax_backward(const Tensor& y, const Tensor& gy, const Tensor& gx, bool log);

  // ---- matmul: a [batch, M, K] (or [batch, K, M] with trans_a), b likewise, out [batch, M, N]
  // contiguous. a and b have unit stride in one of their last two dims; a batch stride of 0
  // broadcasts. bias, if defined, is contiguous [N] and added to every row. One dtype for all:
  // f32 or f64 on the CPU; also bf16 and f16 (accumulating in f32) on other devices. ----
  virtual void matmul(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
                      const MatmulArgs& args);
  // The GELU epilogue: pre = op(a) op(b) (+ bias) and out = gelu(pre) (the tanh form of
  // UnaryOp::gelu), in the GEMM's output pass where the backend can. pre is the pre-activation
  // the backward pass needs. Operands as matmul; pre and out are contiguous [batch, M, N] of
  // one dtype; args.alpha = 1 and args.beta = 0. In f32 and f64 out equals unary(gelu, pre);
  // in a 16-bit dtype the device may apply GELU to the unrounded accumulator (cuBLASLt does).
  virtual void matmul_gelu(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& pre,
                           const Tensor& out, const MatmulArgs& args);

  // ---- normalization over the last dim of contiguous [rows, n]; weight, bias, gw, gb are
  // [n] in x's dtype; mean and rstd are [rows] in f32 (f64 when x is f64) ----
  virtual void layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                 double eps, const Tensor& y, const Tensor& mean,
                                 const Tensor& rstd);
  // gw and gb may be undefined (not needed); when defined they are overwritten.
  virtual void layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                  const Tensor& rstd, const Tensor& gy, const Tensor& gx,
                                  const Tensor& gw, const Tensor& gb);
  virtual void rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                               const Tensor& rstd);
  virtual void rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                const Tensor& gy, const Tensor& gx, const Tensor& gw);

  // ---- embedding: weight contiguous [V, C], ids contiguous i32/i64 [N], out [N, C] ----
  // Throws naming the position of an id outside [0, V).
  virtual void embedding_forward(const Tensor& weight, const Tensor& ids, const Tensor& out);
  // gweight (zeroed by the caller) += scatter of gy rows; deterministic (no racing atomics).
  virtual void embedding_backward(const Tensor& ids, const Tensor& gy, const Tensor& gweight);

  // ---- fused cross-entropy: logits [N, V] with unit stride in V and any row stride (a
  // padded vocabulary arrives as a narrowed view of its first V columns), targets contiguous
  // i32/i64 [N] ----
  // loss (f32 0-d) = mean over valid rows of logsumexp - logit[target]; rows whose target is
  // ignore_index are skipped. lse (f32 [N]) is saved for backward; valid (f32 0-d) counts rows.
  // loss, lse, valid and gloss are f64 instead when logits are f64.
  virtual void cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                     int64_t ignore_index, const Tensor& loss, const Tensor& lse,
                                     const Tensor& valid);
  // glogits = (softmax(logits) - onehot(target)) * gloss / valid, zero on ignored rows;
  // glogits has logits' shape, unit stride in V and its own row stride.
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                      const Tensor& lse, const Tensor& gloss, const Tensor& valid,
                                      int64_t ignore_index, const Tensor& glogits);

  // ---- causal attention: q [B, H, Tq, D], k and v [B, Hkv, Tk, D] with H % Hkv == 0 and
  // Tq <= Tk (query i sits at position Tk - Tq + i). Unit stride in D, any other strides.
  // out [B, H, Tq, D] (any strides), lse [B, H, Tq] contiguous, f32 (f64 for f64 inputs).
  // Never forms Tq x Tk. ----
  virtual void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                 const Tensor& out, const Tensor& lse);
  virtual void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, const Tensor& gout,
                                  double scale, const Tensor& gq, const Tensor& gk,
                                  const Tensor& gv);
  // Rotary embedding over x [B, T, H, D] (any strides, unit stride in D), rotating the halves
  // (d, d + D/2) by angle (pos_offset + t) * theta^(-2d/D). inverse rotates the other way
  // (the backward pass).
  virtual void rope(const Tensor& x, const Tensor& out, int64_t pos_offset, double theta,
                    bool inverse);

  // ---- dropout: out = keep ? x / (1 - p) : 0, with keep decided by the Philox stream of
  // (seed, offset + i) for contiguous x, out. Applying it to gy with the same key is the
  // backward pass. ----
  virtual void dropout(const Tensor& x, const Tensor& out, double p, uint64_t seed,
                       uint64_t offset);

  // ---- optimizer ----
  // In place on contiguous f32 param, m, v of one shape; grad contiguous f32, bf16 or f16 of
  // that shape. rounded: undefined, or a contiguous bf16/f16 tensor of that shape that receives
  // the updated param rounded as args says (the master -> compute copy of mixed precision).
  virtual void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                          const Tensor& rounded, const AdamWArgs& args);
  // out (f32 0-d) = sum over tensors of sum(x^2), in a fixed order.
  virtual void squared_norm(const std::vector<Tensor>& xs, const Tensor& out);

 protected:
  [[noreturn]] void not_implemented(const char* op) const;
};

// The backend that owns `device`. The CPU backend always exists; others register themselves.
Backend& backend_for(Device device);

namespace detail {
// The CPU backend, which core/cpu/ implements (cpu_backend.cpp): declared here so that the
// registry needs nothing from the folder below it.
Backend& host_backend();
}  // namespace detail
// Installs the backend for a device type (the CUDA library calls this when loaded).
void register_backend(DeviceType type, Backend* backend);

}  // namespace tessera
