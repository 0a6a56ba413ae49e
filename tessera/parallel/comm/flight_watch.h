#pragma once
// FlightWatch: when every rank of a job dumps its flight recorder (flight_recorder.h), into
// <dir>/rank_<world rank>.json, where `tessera diagnose <dir>/..` merges them.
//
// A rank dumps:
//   - when one of its calls times out or fails (the recorder's failure hook). It then writes
//     <dir>/request, which every other rank's watch thread sees within a poll (50 ms) and
//     answers with its own dump: the ranks that are not inside a failing call (one that
//     skipped it and waits elsewhere, one that sleeps or computes) dump too;
//   - when <dir>/request changes (another rank's failure, or a person touching it);
//   - on SIGUSR2 (request_from_signal(), from the handler): what `tessera launch` sends before
//     it kills a stuck job.
// The failing rank then waits, bounded (wait_for_dumps), until every rank has answered before
// the job ends: a dead rank leaves no dump, and the merge names it.
//
// The request travels through the file system because the job's communicators are broken by
// then; <dir> must be shared by the ranks (the run directory, as for checkpoints).

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/parallel/comm/communicator.h"
#include "tessera/parallel/comm/flight_recorder.h"

namespace tessera::parallel {

class FlightWatch {
 public:
  // Watches `world`'s recorder (shared by every group split from it): installs its failure
  // hook and starts the watch thread. A request already in <dir> (from an earlier run) is not
  // answered.
  FlightWatch(Communicator& world, std::string dir, double poll_seconds = 0.05);
  ~FlightWatch();
  FlightWatch(const FlightWatch&) = delete;
  FlightWatch& operator=(const FlightWatch&) = delete;

  // Dumps this rank's ring now; failures to write are reported on stderr, never thrown (the
  // dump runs on the way out of a failing job).
  void dump(const std::string& reason);
  // dump(), then writes <dir>/request so that every other rank dumps.
  void dump_and_request(const std::string& reason);
  // Whether this rank's recorder saw a call fail (its hook dumped and requested already).
  bool failed() const { return recorder_->failed(); }
  // Waits up to `seconds` until every rank's dump is at least as new as the newest request
  // this rank made or answered. Returns the ranks whose dump is missing or older.
  std::vector<int> wait_for_dumps(double seconds) const;

  // Async-signal-safe: every watch of this process dumps at its next poll (SIGUSR2).
  static void request_from_signal();

  const std::string& dir() const { return dir_; }
  std::string dump_path(int rank) const;

 private:
  void watch();
  // answered_ = max(answered_, id); whether it rose.
  bool raise_answered(int64_t id);
  // The request file's id (microseconds since the epoch when it was written) and what it says,
  // or 0 when there is none.
  int64_t read_request(std::string* what) const;

  std::shared_ptr<FlightRecorder> recorder_;
  std::string dir_;
  int rank_, world_size_;
  double poll_seconds_;
  std::mutex dump_mutex_;
  std::atomic<int64_t> answered_{0};  // the newest request this rank dumped for (its id)
  int64_t seen_request_ = 0;          // watch thread only
  int64_t seen_mtime_ns_ = 0;         // watch thread only: the request file's, last read
  uint64_t seen_signals_ = 0;         // watch thread only
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tessera::parallel
