#pragma once
// SnapshotStaging: a checkpoint's snapshot of GPU state without stalling the training loop.
// At a save, every device tensor of the rank's part is downloaded on the device's copy stream
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
//
// A streamed snapshot (--checkpoint-snapshot stream) bounds that extra to one chunk instead:
// settle() waits for the device at the save, and the writer thread then reads the live state
// chunk by chunk (chunked_reads(): StreamOrder::read_now into one page-locked buffer) while
// the loop goes on; the next update waits until the last chunk is in the file. The trade:
// host memory of a chunk rather than of the part, against an update that waits when the
// part takes longer to write than a forward and backward take to run.
//
//   save:      settle() ── device idle ──> loop goes on
//   writer:    read chunk 0 ─ write ─ read chunk 1 ─ write ... ─ release
//   update:    waits for the release (the last chunk written)

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/nn/io/safetensors.h"
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

  // Blocks until the device has run everything queued on it: a streamed snapshot's writer
  // then reads state that nothing still writes.
  void settle();
  // Reads for CheckpointWriter::set_chunked_reads: a page-locked buffer of chunk_bytes
  // (rounded up to 8) that read_now fills from any thread.
  std::shared_ptr<nn::ChunkedReads> chunked_reads(int64_t chunk_bytes) const;

 private:
  parallel::HostTransfers transfers_;
  std::map<DType, Tensor> buffers_;  // page-locked, grown as needed
};

}  // namespace tessera::train
