#pragma once
// CommError and CommHealth: what happens when a collective times out or fails.
//
// A collective that never completes (a peer died or hangs) or whose transport reports an
// error leaves its group unusable: MPI and NCCL cannot cancel a posted collective, so its
// buffers may still be written and its peers may still be inside it. The library does not end
// the process. It throws CommError, which names the rank, group, collective and step, and
// marks the group's family (the world it was split from and every split of that world)
// broken: each later call on any of them throws CommError at once, naming the first failure.
// The caller decides what to do: `tessera train` ends the job (exit 124) so that a supervisor
// restarts it; a research program embedding Tessera may log, save what it holds locally and
// exit. It cannot finalize MPI with a broken group (finalize would wait on the dead
// collective), so parallel::MpiSession ends such a process with MPI_Abort.

#include <atomic>
#include <mutex>
#include <string>

#include "tessera/core/error.h"

namespace tessera::parallel {

class CommError : public Error {
 public:
  explicit CommError(const std::string& message) : Error(message) {}
};

class CommHealth {
 public:
  bool broken() const { return broken_.load(std::memory_order_acquire); }
  // The first failure's message ("" while healthy).
  std::string reason() const;
  // Records `message` as the failure (the first one wins), then throws CommError(message).
  [[noreturn]] void fail(const std::string& message);
  // Throws CommError when broken: `call` (the refused call, as describe_call words it) and the
  // first failure.
  void check(const std::string& call) const;

 private:
  std::atomic<bool> broken_{false};
  mutable std::mutex mutex_;
  std::string reason_;
};

// Whether any communicator of this process broke (MpiSession's destructor asks).
bool any_comm_broken();

}  // namespace tessera::parallel
