#include "tessera/nn/io/detail/posix_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::nn {

PosixFile::PosixFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  TESSERA_CHECK(fd_ >= 0, "cannot open ", path_, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string why = S_ISDIR(st.st_mode) ? "it is a directory" : "it is not a regular file";
    ::close(fd_);
    detail::throw_error("cannot read ", path_, ": ", why);
  }
  size_ = uint64_t(st.st_size);
}

PosixFile::~PosixFile() {
  if (fd_ >= 0) ::close(fd_);
}

void PosixFile::read_at(uint64_t offset, void* dst, uint64_t n) const {
  TESSERA_CHECK(offset <= size_ && n <= size_ - offset, path_, ": reading ", n, " bytes at offset ",
                offset, " runs past the end of the file (", size_, " bytes)");
  char* p = static_cast<char*>(dst);
  uint64_t done = 0;
  while (done < n) {
    ssize_t got = ::pread(fd_, p + done, n - done, off_t(offset + done));
    if (got < 0 && errno == EINTR) continue;
    TESSERA_CHECK(got > 0, path_, ": read of ", n, " bytes at offset ", offset, " stopped after ",
                  done, " bytes: ", got < 0 ? std::strerror(errno) : "the file got shorter");
    done += uint64_t(got);
  }
}

}  // namespace tessera::nn
