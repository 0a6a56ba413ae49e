#include "tessera/train/detail/snapshot_staging.h"

#include <utility>

#include "tessera/core/backend.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/movement.h"
#include "tessera/cuda/stream_order.h"

namespace tessera::train {

int64_t SnapshotStaging::stage(const std::vector<Tensor*>& tensors) {
  std::map<DType, int64_t> need;
  for (const Tensor* t : tensors) {
    TESSERA_CHECK(
        (t->device() == transfers_.device() || t->device().is_cpu()) && t->is_contiguous(),
        "SnapshotStaging: expected contiguous ", transfers_.device(), " or CPU tensors, ", "got ",
        t->describe());
    need[t->dtype()] += t->numel();
  }
  for (const auto& [dtype, numel] : need) {
    Tensor& buffer = buffers_[dtype];
    if (!buffer.defined() || buffer.numel() < numel) buffer = transfers_.host_empty(numel, dtype);
  }
  transfers_.end_downloads();
  std::map<DType, int64_t> used;
  int64_t bytes = 0;
  // The first download waits for the compute stream; the rest queue behind it.
  auto after = parallel::HostTransfers::After::compute;
  for (Tensor* t : tensors) {
    int64_t& at = used[t->dtype()];
    Tensor host = ops::reshape(ops::narrow(buffers_.at(t->dtype()), 0, at, t->numel()), t->shape());
    if (t->device().is_cpu())
      ops::copy_(host, *t);  // host state (an offloaded optimizer's): a plain copy
    else
      transfers_.download(*t, host, std::exchange(after, parallel::HostTransfers::After::previous));
    at += t->numel();
    bytes += int64_t(t->nbytes());
    *t = host;
  }
  return bytes;
}

void SnapshotStaging::land() {
  transfers_.end_downloads();
}

void SnapshotStaging::settle() {
  backend_for(transfers_.device()).synchronize();
}

std::shared_ptr<nn::ChunkedReads> SnapshotStaging::chunked_reads(int64_t chunk_bytes) const {
  TESSERA_CHECK(chunk_bytes > 0, "SnapshotStaging: the chunk must be positive, got ", chunk_bytes,
                " bytes");
  const Device device = transfers_.device();
  TESSERA_CHECK(device.is_cuda(), "SnapshotStaging: chunked reads read a GPU's memory, but the ",
                "state is on ", device);
  cuda::StreamOrder& order = cuda::stream_order();
  auto reads = std::make_shared<nn::ChunkedReads>();
  reads->buffer = transfers_.host_empty((chunk_bytes + 7) / 8, DType::i64);
  reads->read = [&order](void* dst, const Tensor& src, size_t offset, size_t bytes) {
    order.read_now(dst, static_cast<const char*>(src.data_ptr("checkpoint read")) + offset, bytes);
  };
  return reads;
}

}  // namespace tessera::train
