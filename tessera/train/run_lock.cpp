#include "tessera/train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "tessera/core/error.h"

namespace tessera::train {

std::unique_ptr<RunLock> RunLock::take(const std::string& run_dir, std::string* holder) {
  const std::string path = (std::filesystem::path(run_dir) / "train.lock").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TESSERA_CHECK(fd >= 0, "train: cannot open ", path, ": ", std::strerror(errno));
  // A job killed just before this one (a restart by `tessera launch`) may still be exiting:
  // its lock goes with its last breath, so wait a moment before calling it a second job.
  const auto deadline = std::chrono::steady_clock::now() + kWaitForExit;
  int error = 0;
  while (true) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return std::unique_ptr<RunLock>(new RunLock(fd));
    error = errno;
    if (error != EWOULDBLOCK || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::close(fd);
  if (error == EWOULDBLOCK) {
    *holder = str_cat("another tessera train is writing to ", run_dir, " (it holds ", path,
                      "; `fuser ", path, "` names it)");
    return nullptr;
  }
  // No flock on this filesystem: nothing to guard with, and no reason to refuse the run.
  TESSERA_CHECK(error == ENOLCK || error == EOPNOTSUPP || error == ENOSYS || error == EINVAL,
                "train: cannot lock ", path, ": ", std::strerror(error));
  return std::unique_ptr<RunLock>(new RunLock(-1));
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace tessera::train
