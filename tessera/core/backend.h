#pragma once
// The Backend interface: what a device must do for the op front end (ops/).
//
// Its ops and their contracts are the op table, core/op_table.def: the front end has already
// validated inputs, promoted dtypes, broadcast operands and allocated outputs, so a backend
// sees well-formed tensors on its own device and only computes. A backend that lacks an op
// inherits the default, which throws an Error naming the op and the device.

#include <cstdint>
#include <vector>

#include "tessera/core/allocator.h"
#include "tessera/core/tensor.h"

namespace tessera {

enum class UnaryOp : uint8_t {
#define TESSERA_UNARY_OP(name) name,
#include "tessera/core/op_table.def"
  pow_scalar,  // x^scalar
};
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

  // One virtual method per entry of the op table, with its contract there.
#define TESSERA_BACKEND_OP(name, params, args, front_ops) virtual void name params;
#include "tessera/core/op_table.def"

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
