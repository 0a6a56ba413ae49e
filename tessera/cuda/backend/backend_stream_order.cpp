// CudaBackend's StreamOrder (tessera/cuda/stream_order.h): events of the runtime (cudart or
// the simulator's streams) behind void*. Every call makes the device current first, as a
// communicator may call from a thread that never touched it.

#include "tessera/cuda/backend/cuda_backend.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

namespace {

cudaStream_t as_stream(StreamOrder::Stream stream) {
  return static_cast<cudaStream_t>(stream);
}
// The runtime's event type (the class scope's Event is StreamOrder's void*).
using RuntimeEvent = ::tessera::cuda::Event;
RuntimeEvent as_event(StreamOrder::Event event) {
  return static_cast<RuntimeEvent>(event);
}

}  // namespace

bool CudaBackend::simulated() const {
#if defined(__CUDACC__)
  return false;
#else
  return true;
#endif
}

StreamOrder::Event CudaBackend::record_event(Stream stream) {
  context_.compute_stream();  // opens the device and makes it current
  RuntimeEvent event = runtime::event_create();
  runtime::event_record(event, as_stream(stream));
  return event;
}

void CudaBackend::stream_wait_event(Stream stream, StreamOrder::Event event) {
  context_.compute_stream();
  runtime::stream_wait_event(as_stream(stream), as_event(event));
}

bool CudaBackend::event_done(StreamOrder::Event event) {
  context_.compute_stream();
  return runtime::event_query(as_event(event));
}

void CudaBackend::event_synchronize(StreamOrder::Event event) {
  context_.compute_stream();
  runtime::event_synchronize(as_event(event));
}

void CudaBackend::destroy_event(StreamOrder::Event event) {
  runtime::event_destroy(as_event(event));
}

void CudaBackend::copy_async(void* dst, const void* src, size_t bytes, bool to_host,
                             Stream stream) {
  context_.compute_stream();
  runtime::memcpy_async(dst, src, bytes,
                        to_host ? CopyKind::device_to_host : CopyKind::host_to_device,
                        as_stream(stream));
}

void CudaBackend::read_now(void* dst, const void* src, size_t bytes) {
  context_.compute_stream();
  runtime::memcpy_to_host_now(dst, src, bytes);
}

std::shared_ptr<Storage> CudaBackend::pinned_host_storage(size_t bytes) {
  context_.compute_stream();
  void* p = runtime::host_alloc_pinned(bytes);
  return std::make_shared<Storage>(p, bytes, Device::cpu(),
                                   [](void* q) { runtime::host_free_pinned(q); });
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
