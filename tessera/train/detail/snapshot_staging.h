#pragma once
// SnapshotStaging: a checkpoint's snapshot of GPU state without stalling the training loop.
// At a save, every device tensor of the rank's part is downloaded on the communication stream
// (after an event from the compute stream, so the copies see every kernel queued before the
// save) into page-locked host memory, and the loop goes on at once; the copies overlap the
// next forward and backward. land(), called before the next optimizer update changes the
// state (and before the writer thread may read the buffers), blocks until they are in.
//
//   save:      stage(pieces) ── downloads queued ──> loop goes on
//   update:    land() ── host waits for the downloads (usually done) ──> update kernels
//   writer:    waits for land() ── writes the page-locked buffers
//
// Extra memory: the rank's part in page-locked host memory, none on the device. The buffers
// are kept for the next save, which reuses them once the writer is done with them (a save
// waits for the one before it).

#include <cstdint>
#include <map>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/parallel/data/host_transfers.h"

namespace tessera::train {

class SnapshotStaging {
 public:
  explicit SnapshotStaging(Device device) : transfers_(device) {}

  // Replaces each tensor (contiguous, on the staging device) by a host view that its
  // download fills; returns the bytes staged. Host tensors among them (an offloaded
  // optimizer's state) are copied at once. The previous staging must have landed.
  int64_t stage(const std::vector<Tensor*>& tensors);
  // Blocks until every download of the last stage() has landed.
  void land();

 private:
  parallel::HostTransfers transfers_;
  std::map<DType, Tensor> buffers_;  // page-locked, grown as needed
};

}  // namespace tessera::train
