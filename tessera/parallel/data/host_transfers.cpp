#include "tessera/parallel/data/host_transfers.h"

#include "tessera/core/empty.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/cuda/stream_order.h"

namespace tessera::parallel {

namespace {

cuda::StreamOrder* order_for(Device device) {
  if (!device.is_cuda()) return nullptr;
  return dynamic_cast<cuda::StreamOrder*>(&backend_for(device));
}

}  // namespace

HostTransfers::HostTransfers(Device device) : device_(device) {
  streams_ = order_for(device_) != nullptr;
}

HostTransfers::~HostTransfers() {
  if (!streams_) return;
  cuda::StreamOrder& order = *order_for(device_);
  for (void* e : events_)
    if (e != nullptr) order.destroy_event(e);
  if (uploads_done_ != nullptr) order.destroy_event(uploads_done_);
}

Tensor HostTransfers::host_empty(int64_t numel, DType dtype) const {
  const size_t bytes = size_t(numel) * dtype_size(dtype);
  Tensor t;
  if (streams_) {
    auto storage = order_for(device_)->pinned_host_storage(bytes);
    t = Tensor(storage, Shape{numel}, Strides{1}, 0, dtype);
  } else {
    t = empty(Shape{numel}, dtype, Device::cpu());
  }
  ops::zero_(t);
  return t;
}

int HostTransfers::download(const Tensor& src, const Tensor& dst, After after) {
  TESSERA_CHECK(src.device() == device_ && dst.device().is_cpu() && src.dtype() == dst.dtype() &&
                    src.numel() == dst.numel() && src.is_contiguous() && dst.is_contiguous(),
                "HostTransfers::download: expected a contiguous ", device_, " tensor and a host ",
                "tensor of the same dtype and size, got ", src.describe(), " and ", dst.describe());
  const int ticket = int(waited_.size());
  if (!streams_) {
    ops::copy_(dst, src);
    waited_.push_back(true);
    events_.push_back(nullptr);
    return ticket;
  }
  cuda::StreamOrder& order = *order_for(device_);
  void* copy = order.copy_stream();
  if (after != After::previous) {
    void* ready =
        order.record_event(after == After::compute ? order.compute_stream() : order.comm_stream());
    order.stream_wait_event(copy, ready);
    order.destroy_event(ready);
  }
  order.copy_async(dst.data_ptr("offload download"), src.data_ptr("offload download"), dst.nbytes(),
                   /*to_host=*/true, copy);
  events_.push_back(order.record_event(copy));
  waited_.push_back(false);
  return ticket;
}

void HostTransfers::wait(int ticket) {
  TESSERA_CHECK(ticket >= 0 && ticket < int(waited_.size()), "HostTransfers::wait: ticket ", ticket,
                " was not handed out since end_downloads (", waited_.size(), " were)");
  if (waited_[size_t(ticket)]) return;
  order_for(device_)->event_synchronize(events_[size_t(ticket)]);
  waited_[size_t(ticket)] = true;
}

void HostTransfers::end_downloads() {
  for (size_t i = 0; i < waited_.size(); ++i) wait(int(i));
  if (streams_) {
    cuda::StreamOrder& order = *order_for(device_);
    for (void* e : events_)
      if (e != nullptr) order.destroy_event(e);
  }
  events_.clear();
  waited_.clear();
}

void HostTransfers::upload(const Tensor& src, const Tensor& dst) {
  TESSERA_CHECK(dst.device() == device_ && src.device().is_cpu() && src.dtype() == dst.dtype() &&
                    src.numel() == dst.numel() && src.is_contiguous() && dst.is_contiguous(),
                "HostTransfers::upload: expected a host tensor and a contiguous ", device_,
                " tensor of the same dtype and size, got ", src.describe(), " and ",
                dst.describe());
  if (!streams_) {
    ops::copy_(dst, src);
    return;
  }
  cuda::StreamOrder& order = *order_for(device_);
  void* ready = order.record_event(order.compute_stream());
  order.stream_wait_event(order.comm_stream(), ready);
  order.destroy_event(ready);
  order.copy_async(dst.data_ptr("offload upload"), src.data_ptr("offload upload"), dst.nbytes(),
                   /*to_host=*/false, order.comm_stream());
  uploads_pending_ = true;
}

void HostTransfers::end_uploads() {
  if (!uploads_pending_) return;
  cuda::StreamOrder& order = *order_for(device_);
  if (uploads_done_ != nullptr) order.destroy_event(uploads_done_);
  uploads_done_ = order.record_event(order.comm_stream());
  order.stream_wait_event(order.compute_stream(), uploads_done_);
  uploads_pending_ = false;
}

void HostTransfers::sync_uploads() {
  end_uploads();
  if (uploads_done_ == nullptr) return;
  order_for(device_)->event_synchronize(uploads_done_);
}

}  // namespace tessera::parallel
