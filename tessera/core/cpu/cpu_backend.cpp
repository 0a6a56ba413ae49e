#include "tessera/core/cpu/cpu_backend.h"

namespace tessera {

CpuBackend& cpu_backend() {
  // Constructed on first use and never destroyed, so tensors freed during static destruction
  // still find their allocator.
  static CpuBackend* backend = new CpuBackend();
  return *backend;
}

Backend& detail::host_backend() {
  return cpu_backend();
}

}  // namespace tessera
