#include "tessera/cuda/backend/device_context.h"

#include "tessera/core/error.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

DeviceContext::~DeviceContext() {
  // Only a started context owns driver objects; errors at teardown are not worth a throw.
  if (compute_ == nullptr) return;
  try {
    runtime::event_destroy(compute_done_);
    runtime::event_destroy(comm_done_);
    runtime::stream_destroy(compute_);
    runtime::stream_destroy(comm_);
    runtime::stream_destroy(copy_);
  } catch (const Error&) {
  }
}

void DeviceContext::ensure_started() {
  std::call_once(started_, [&] {
    const int count = runtime::device_count();
    TESSERA_CHECK(index_ < count, "cuda:", index_, " is not available: ", count,
                  " CUDA device(s) visible (no GPU, or no driver)");
    runtime::set_device(index_);
    runtime::configure_pool(index_);
    compute_ = runtime::stream_create();
    comm_ = runtime::stream_create();
    copy_ = runtime::stream_create();
    compute_done_ = runtime::event_create();
    comm_done_ = runtime::event_create();
  });
  runtime::set_device(index_);
}

cudaStream_t DeviceContext::compute_stream() {
  ensure_started();
  return compute_;
}

cudaStream_t DeviceContext::comm_stream() {
  ensure_started();
  return comm_;
}

cudaStream_t DeviceContext::copy_stream() {
  ensure_started();
  return copy_;
}

void DeviceContext::comm_waits_for_compute() {
  ensure_started();
  runtime::event_record(compute_done_, compute_);
  runtime::stream_wait_event(comm_, compute_done_);
}

void DeviceContext::compute_waits_for_comm() {
  ensure_started();
  runtime::event_record(comm_done_, comm_);
  runtime::stream_wait_event(compute_, comm_done_);
}

void DeviceContext::synchronize() {
  ensure_started();
  runtime::stream_synchronize(compute_);
  runtime::stream_synchronize(comm_);
  runtime::stream_synchronize(copy_);
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
