#pragma once
// CheckpointWriter: saves checkpoints on a background thread, so the training loop stalls only
// for the snapshot (a copy of every tensor into memory the writer owns) rather than for the
// write and fsync of the files.
//
//   step 10: snapshot ──> [thread: write model, optimizer, state.json, fsync, rename, latest]
//   step 11 ... 19 train meanwhile
//   step 20: save() waits for step 10's write, then snapshots step 20
//
// One write at a time: a save waits for the one before it, so memory holds at most one extra
// copy of the state, and checkpoints are published in step order. The files and their
// atomicity are save_checkpoint's (checkpoint.h): a process killed mid-write leaves the
// previous checkpoint loadable and a temporary directory that readers ignore. A failed write
// (a full disk) is reported by the next save() or wait(), naming the step.

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "tessera/nn/io/checkpoint.h"
#include "tessera/nn/io/local_checkpoint.h"
#include "tessera/nn/io/sharded_checkpoint.h"

namespace tessera::nn {

class CheckpointWriter {
 public:
  CheckpointWriter();
  // Waits for the write in flight; a failure of it is printed to stderr (a destructor cannot
  // throw): call wait() first to handle it.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Waits for the previous write (rethrowing its failure), copies data's tensors, and writes
  // the copy in the background as save_checkpoint(run_dir, copy, keep) would. Returns the
  // directory the checkpoint will have. The caller may change or free data's tensors as soon
  // as it returns.
  std::string save(const std::string& run_dir, const CheckpointData& data, int64_t keep);
  // The same for one rank's shard of a sharded set: waits for the previous write and runs
  // write_shard(job) in the background (rank 0's includes waiting for the other ranks' shards
  // and publishing the manifest). The snapshot:
  //   copy    the pieces are copied into host memory the writer owns before this returns
  //           (extra memory: the rank's whole share; device tensors block the loop while
  //           they are copied);
  //   stream  the pieces stay views of the live state and the thread writes them straight
  //           into the file: no extra memory for host tensors, one chunk for device ones
  //           (read through set_chunked_reads(), after the device has settled:
  //           nothing queued may still write them), but the state must not change until
  //           wait_for_snapshot() returns (the trainer calls it before the next optimizer
  //           update, so the write overlaps the next forward and backward);
  //   staged  with `land`: the pieces are host buffers that asynchronous copies (a GPU's
  //           state, downloaded on a side stream into page-locked memory) are still filling;
  //           land blocks until they have, and the thread writes only after it returned. land
  //           runs once, on the caller's thread, inside the first wait_for_snapshot(), wait()
  //           or next save. Without `land`: the pieces are live host tensors, and the thread
  //           first copies them into memory it owns, then writes the copy; the state must not
  //           change until wait_for_snapshot() returns, which is when the copy is done. The
  //           copy so runs beside the next forward and backward instead of stalling the loop
  //           (extra memory: the rank's share, as for copy).
  enum class Snapshot { copy, stream, staged };
  std::string save_shard(ShardJob job, Snapshot snapshot = Snapshot::copy,
                         std::function<void()> land = {}, int64_t staged_bytes = 0);
  // The same for a node-local checkpoint (local_checkpoint.h): save_local_checkpoint(rank_dir,
  // step, tensors, fingerprint, state) in the background, the tensors copied, streamed or
  // staged.
  std::string save_local(const std::string& rank_dir, int64_t step, StateDict tensors,
                         const nlohmann::json& fingerprint, const nlohmann::json& state,
                         Snapshot snapshot, std::function<void()> land = {},
                         int64_t staged_bytes = 0);
  // How streamed snapshots read device tensors, one chunk of host memory at a time (without
  // it a streamed snapshot refuses them). Takes effect from the next save.
  void set_chunked_reads(std::shared_ptr<const ChunkedReads> chunked);
  // Blocks until a streamed snapshot's bytes are written (not yet fsynced), or a staged one
  // has landed; returns the seconds it waited. Immediate for a copy, or with nothing in flight.
  double wait_for_snapshot();
  // Blocks until the write in flight (if any) is on disk; rethrows its failure once.
  void wait();
  // The bytes of the snapshot in flight (0 when idle): the extra memory a save holds.
  int64_t pending_bytes() const;
  // The bytes the latest save's snapshot copied or staged: 0 for a streamed one of host
  // tensors, the chunk buffer's for one that read device tensors.
  int64_t last_snapshot_bytes() const;

 private:
  // A write: called on the thread with the function that releases a streamed snapshot.
  using Task = std::function<void(const std::function<void()>& release)>;
  // Waits for the previous write, then queues task (its snapshot already taken: `bytes`
  // copied or staged, or streamed; a staged one lands through `land`).
  void submit(int64_t step, Task task, int64_t bytes, Snapshot snapshot,
              std::function<void()> land);
  // Runs a staged snapshot's land on this thread and lets the writer go on (no-op otherwise).
  void land();
  void run();

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool busy_ = false, stop_ = false;
  bool reading_ = false;  // a streamed snapshot still reads the live state
  bool landed_ = true;    // a staged snapshot's copies have landed (or there is none)
  std::function<void()> land_;
  std::shared_ptr<const ChunkedReads> chunked_;  // read on the caller's thread only
  std::exception_ptr land_failure_;
  int64_t step_ = 0;
  Task task_;
  int64_t job_bytes_ = 0, last_bytes_ = 0;
  std::exception_ptr failure_;
  std::thread thread_;
};

}  // namespace tessera::nn
