#include "tessera/train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tessera/core/error.h"

namespace tessera::train {

std::unique_ptr<RunLock> RunLock::take(const std::string& run_dir, std::string* holder) {
  const std::string path = (std::filesystem::path(run_dir) / "train.lock").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TESSERA_CHECK(fd >= 0, "train: cannot open ", path, ": ", std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return std::unique_ptr<RunLock>(new RunLock(fd));
  const int error = errno;
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
