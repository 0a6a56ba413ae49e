#include "tessera/core/backend.h"

#include <array>
#include <atomic>

#include "tessera/core/error.h"

namespace tessera {

const char* unary_op_name(UnaryOp op) {
  static constexpr const char* names[] = {"neg",  "exp",  "log",  "sqrt", "rsqrt",
                                          "tanh", "gelu", "silu", "relu", "pow"};
  return names[int(op)];
}

const char* binary_op_name(BinaryOp op) {
  static constexpr const char* names[] = {"add", "sub", "mul", "div"};
  return names[int(op)];
}

const char* reduce_op_name(ReduceOp op) {
  static constexpr const char* names[] = {"sum", "mean", "max"};
  return names[int(op)];
}

void Backend::not_implemented(const char* op) const {
  detail::throw_error(op, ": not implemented on device ", device());
}

void Backend::copy(const Tensor&, const Tensor&) {
  not_implemented("copy");
}
void Backend::copy_host(const Tensor&, const Tensor&) {
  not_implemented("copy_host");
}
void Backend::fill(const Tensor&, double) {
  not_implemented("fill");
}
void Backend::arange(const Tensor&, double, double) {
  not_implemented("arange");
}
void Backend::random_uniform(const Tensor&, double, double, uint64_t, uint64_t) {
  not_implemented("random_uniform");
}
void Backend::random_normal(const Tensor&, double, double, uint64_t, uint64_t) {
  not_implemented("random_normal");
}
void Backend::unary(UnaryOp op, const Tensor&, const Tensor&, double) {
  not_implemented(unary_op_name(op));
}
void Backend::unary_backward(UnaryOp op, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                             double) {
  not_implemented(unary_op_name(op));
}
void Backend::binary(BinaryOp op, const Tensor&, const Tensor&, const Tensor&) {
  not_implemented(binary_op_name(op));
}
void Backend::where(const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  not_implemented("where");
}
void Backend::reduce(ReduceOp op, const Tensor&, const Tensor&, const Tensor&) {
  not_implemented(reduce_op_name(op));
}
void Backend::max_backward(const Tensor&, const Tensor&, const Tensor&) {
  not_implemented("max_backward");
}
void Backend::softmax(const Tensor&, const Tensor&, bool log) {
  not_implemented(log ? "log_softmax" : "softmax");
}
void Backend::softmax_backward(const Tensor&, const Tensor&, const Tensor&, bool log) {
  not_implemented(log ? "log_softmax_backward" : "softmax_backward");
}
void Backend::matmul(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                     const MatmulArgs&) {
  not_implemented("matmul");
}
void Backend::matmul_gelu(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const MatmulArgs&) {
  not_implemented("matmul_gelu");
}
void Backend::layernorm_forward(const Tensor&, const Tensor&, const Tensor&, double, const Tensor&,
                                const Tensor&, const Tensor&) {
  not_implemented("layernorm");
}
void Backend::layernorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 const Tensor&, const Tensor&, const Tensor&, const Tensor&) {
  not_implemented("layernorm_backward");
}
void Backend::rmsnorm_forward(const Tensor&, const Tensor&, double, const Tensor&, const Tensor&) {
  not_implemented("rmsnorm");
}
void Backend::rmsnorm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                               const Tensor&, const Tensor&) {
  not_implemented("rmsnorm_backward");
}
void Backend::embedding_forward(const Tensor&, const Tensor&, const Tensor&) {
  not_implemented("embedding");
}
void Backend::embedding_backward(const Tensor&, const Tensor&, const Tensor&) {
  not_implemented("embedding_backward");
}
void Backend::cross_entropy_forward(const Tensor&, const Tensor&, int64_t, const Tensor&,
                                    const Tensor&, const Tensor&) {
  not_implemented("cross_entropy");
}
void Backend::cross_entropy_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&, int64_t, const Tensor&) {
  not_implemented("cross_entropy_backward");
}
void Backend::attention_forward(const Tensor&, const Tensor&, const Tensor&, double, const Tensor&,
                                const Tensor&) {
  not_implemented("attention");
}
void Backend::attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 const Tensor&, const Tensor&, double, const Tensor&, const Tensor&,
                                 const Tensor&) {
  not_implemented("attention_backward");
}
void Backend::rope(const Tensor&, const Tensor&, int64_t, double, bool) {
  not_implemented("rope");
}
void Backend::dropout(const Tensor&, const Tensor&, double, uint64_t, uint64_t) {
  not_implemented("dropout");
}
void Backend::adamw_step(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const AdamWArgs&) {
  not_implemented("adamw_step");
}
void Backend::squared_norm(const std::vector<Tensor>&, const Tensor&) {
  not_implemented("squared_norm");
}

namespace {
std::array<std::atomic<Backend*>, 2>& registry() {
  static std::array<std::atomic<Backend*>, 2> backends{};
  return backends;
}
}  // namespace

Backend& backend_for(Device device) {
  if (device.is_cpu()) return detail::host_backend();
  Backend* backend = registry()[size_t(device.type)].load();
  TESSERA_CHECK(backend != nullptr, "device ", device,
                " is not available: this build has no backend registered for it (was Tessera "
                "built with TESSERA_WITH_CUDA and is the CUDA library linked?)");
  return *backend;
}

void register_backend(DeviceType type, Backend* backend) {
  registry()[size_t(type)].store(backend);
}

}  // namespace tessera
