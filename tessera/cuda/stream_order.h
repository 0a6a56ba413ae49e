#pragma once
// StreamOrder: what a communication library needs from the backend serving Device::cuda(), so
// that it can order its work against the kernels without calling the CUDA runtime itself: the
// device, the compute stream (every kernel, copy and pool free), the communication stream, a
// copy stream for transfers to host memory, and events between them. Both CUDA backends implement
// it, the GPU one over cudart and the simulated one over the simulator's streams
// (tessera/cuda/sim/streams.h), so the NCCL communicator is one source over either, and its
// ordering is checked in CI by the simulator's deferred streams.
//
// Streams and events are cudaStream_t and cudaEvent_t (or the simulator's) behind void*, so
// this header needs no CUDA header.

#include <cstddef>
#include <memory>

#include "tessera/core/backend.h"
#include "tessera/core/error.h"
#include "tessera/core/storage.h"

namespace tessera::cuda {

class StreamOrder {
 public:
  using Stream = void*;
  using Event = void*;

  virtual ~StreamOrder() = default;
  // The device index of Device::cuda() tensors, and whether the simulator serves it.
  virtual int device_index() = 0;
  virtual bool simulated() const = 0;
  // Both open the device on first use and make it current on the calling host thread.
  virtual Stream compute_stream() = 0;
  virtual Stream comm_stream() = 0;
  // Downloads to host memory (an offloaded optimizer's gradients, a staged snapshot), so that a
  // copy over PCIe never holds up a collective queued after it on the communication stream.
  virtual Stream copy_stream() = 0;

  // A new event recorded on `stream` after the work queued on it so far; release it with
  // destroy_event (an event may be destroyed while waits on it are still queued).
  virtual Event record_event(Stream stream) = 0;
  // Work queued on `stream` after this call starts once `event` has completed.
  virtual void stream_wait_event(Stream stream, Event event) = 0;
  // Whether the work before `event` has completed. On the GPU this never blocks. The simulated
  // device has no engine running beside the host, so there the query runs the stream up to the
  // event (which may wait for peer ranks inside a simulated collective) and returns true.
  virtual bool event_done(Event event) = 0;
  virtual void event_synchronize(Event event) = 0;
  virtual void destroy_event(Event event) = 0;

  // Host transfers for an optimizer that lives in host memory (parallel/data/host_transfers.h):
  // `bytes` copied on `stream` from device to host (to_host) or back. Page-locked host memory
  // makes the copy asynchronous, so both sides must stay valid until an event recorded after
  // it has completed.
  virtual void copy_async(void* dst, const void* src, size_t bytes, bool to_host,
                          Stream stream) = 0;
  // `bytes` copied from the device to host memory before it returns, from any host thread, on
  // that thread's own stream: after none of the streams above, so the caller must have
  // synchronised whatever wrote src (a checkpoint writer streaming a settled state).
  virtual void read_now(void* dst, const void* src, size_t bytes) = 0;
  // `bytes` of page-locked host memory (cudaMallocHost; on the simulated device, plain host
  // memory) as a CPU storage that frees it when released.
  virtual std::shared_ptr<Storage> pinned_host_storage(size_t bytes) = 0;
};

// The StreamOrder of the backend serving Device::cuda(); throws when no CUDA backend is
// registered.
inline StreamOrder& stream_order() {
  auto* order = dynamic_cast<StreamOrder*>(&backend_for(Device::cuda()));
  TESSERA_CHECK(order != nullptr, "stream_order: Device::cuda() is not served by a CUDA backend");
  return *order;
}

}  // namespace tessera::cuda
