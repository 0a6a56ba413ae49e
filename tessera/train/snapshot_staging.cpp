#include "tessera/train/detail/snapshot_staging.h"

#include "tessera/core/error.h"
#include "tessera/core/ops/movement.h"

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
  transfers_.begin_downloads();
  std::map<DType, int64_t> used;
  int64_t bytes = 0;
  for (Tensor* t : tensors) {
    int64_t& at = used[t->dtype()];
    Tensor host = ops::reshape(ops::narrow(buffers_.at(t->dtype()), 0, at, t->numel()), t->shape());
    if (t->device().is_cpu())
      ops::copy_(host, *t);  // host state (an offloaded optimizer's): a plain copy
    else
      transfers_.download(*t, host);
    at += t->numel();
    bytes += int64_t(t->nbytes());
    *t = host;
  }
  return bytes;
}

void SnapshotStaging::land() {
  transfers_.end_downloads();
}

}  // namespace tessera::train
