#include "tessera/core/backend.h"

#include <array>
#include <atomic>

#include "tessera/core/error.h"

namespace tessera {

const char* unary_op_name(UnaryOp op) {
  static constexpr const char* names[] = {
#define TESSERA_UNARY_OP(name) #name,
#include "tessera/core/op_table.def"
      "pow"};
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

// The defaults: an op a backend does not override names itself and the device.
#define TESSERA_BACKEND_OP(name, params, args, front_ops) \
  void Backend::name params {                             \
    not_implemented(#name);                               \
  }
#include "tessera/core/op_table.def"

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
