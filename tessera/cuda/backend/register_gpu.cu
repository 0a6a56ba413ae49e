// Registration of the GPU backend (tessera/cuda/cuda.h). A backend for cuda:0 is registered
// when the program starts; it opens the device only when first used, so linking the library
// costs programs that never touch a GPU nothing. init_device() replaces it for another index.

#include <memory>
#include <mutex>

#include "tessera/cuda/backend/cuda_backend.h"
#include "tessera/cuda/cuda.h"

namespace tessera::cuda {
namespace {

std::mutex g_mutex;
CudaBackend* g_backend = nullptr;  // guarded by g_mutex; backends are never destroyed

CudaBackend& backend_for_index(int index) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_backend == nullptr || g_backend->context().index() != index) {
    g_backend = new CudaBackend(index);
    register_backend(DeviceType::cuda, g_backend);
  }
  return *g_backend;
}

const bool g_registered = (backend_for_index(0), true);

}  // namespace

int device_count() {
  return runtime::device_count();
}

void init_device(int index) {
  const int count = runtime::device_count();
  TESSERA_CHECK(index >= 0 && index < count, "init_device: cuda:", index,
                " does not exist: ", count, " CUDA device(s) visible");
  backend_for_index(index).context().compute_stream();  // opens the device now
}

DeviceStreams device_streams() {
  auto* backend = dynamic_cast<CudaBackend*>(&backend_for(Device::cuda()));
  TESSERA_CHECK(backend != nullptr, "device_streams: Device::cuda() is served by the simulated ",
                "backend (use_simulated_device), which has no CUDA streams");
  DeviceContext& context = backend->context();
  return {context.index(), context.compute_stream(), context.comm_stream()};
}

bool device_is_simulated() {
  return dynamic_cast<CudaBackend*>(&backend_for(Device::cuda())) == nullptr;
}

}  // namespace tessera::cuda
