#pragma once
// One training job per run directory. Rank 0 holds an exclusive flock(2) on
// <run_dir>/train.lock for the trainer's life: a second job there (the same command started
// twice, a requeued job that overlaps the one it replaces) would write one set of checkpoints
// and one metrics.jsonl with the first, each truncating the other's log on resume. The kernel
// drops the lock when the process ends, however it ends, so a crash leaves none behind.

#include <chrono>
#include <memory>
#include <string>

namespace tessera::train {

class RunLock {
 public:
  // How long take() waits for a holder that may be exiting before it gives up.
  static constexpr std::chrono::milliseconds kWaitForExit{2000};

  // The lock on <run_dir>/train.lock, or nullptr with *holder saying who has it (another
  // process, or another trainer of this one) once kWaitForExit has passed. A filesystem without
  // flock (some network mounts answer ENOLCK or EOPNOTSUPP) gives a lock that guards nothing: the
  // run goes on as before.
  static std::unique_ptr<RunLock> take(const std::string& run_dir, std::string* holder);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  // Whether the filesystem granted it (false where it has no flock).
  bool guards() const { return fd_ >= 0; }

 private:
  explicit RunLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace tessera::train
