#include "tessera/core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tessera/core/error.h"

namespace tessera {

namespace {

std::string errno_text() {
  return std::strerror(errno);
}

std::string parent_of(const std::string& path) {
  std::filesystem::path p(path);
  std::filesystem::path parent = p.parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  TESSERA_CHECK(fd >= 0, "fsync: cannot open ", path, ": ", errno_text());
  int rc = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  errno = saved;
  TESSERA_CHECK(rc == 0, "fsync: ", path, ": ", errno_text());
}

// A unique temporary name next to `path` (same filesystem, so rename is atomic).
std::string temp_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_path_(temp_name(path_)) {
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TESSERA_CHECK(fd_ >= 0, "cannot create ", tmp_path_, " (to write ", path_, "): ", errno_text());
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_path_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t nbytes) {
  TESSERA_CHECK(fd_ >= 0, "write to ", path_, ": the file was already committed");
  const char* p = static_cast<const char*>(data);
  while (nbytes > 0) {
    ssize_t n = ::write(fd_, p, nbytes);
    if (n < 0 && errno == EINTR) continue;
    TESSERA_CHECK(n > 0, "write to ", tmp_path_, " failed after ", written_,
                  " bytes: ", errno_text());
    p += n;
    nbytes -= size_t(n);
    written_ += uint64_t(n);
  }
}

void AtomicFile::commit() {
  TESSERA_CHECK(fd_ >= 0, "commit ", path_, ": the file was already committed");
  TESSERA_CHECK(::fsync(fd_) == 0, "fsync ", tmp_path_, ": ", errno_text());
  TESSERA_CHECK(::close(fd_) == 0, "close ", tmp_path_, ": ", errno_text());
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    std::string err = errno_text();
    ::unlink(tmp_path_.c_str());
    detail::throw_error("rename ", tmp_path_, " -> ", path_, ": ", err);
  }
  fsync_path(parent_of(path_), true);
}

void write_file_atomic(const std::string& path, std::span<const char> bytes) {
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

void write_file_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, std::span<const char>(text.data(), text.size()));
}

void fsync_directory_tree(const std::string& dir) {
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    if (entry.is_regular_file()) fsync_path(entry.path().string(), false);
    if (entry.is_directory()) fsync_path(entry.path().string(), true);
  }
  fsync_path(dir, true);
}

void publish_directory(const std::string& tmp_dir, const std::string& target) {
  TESSERA_CHECK(!std::filesystem::exists(target), "publish ", tmp_dir, " -> ", target,
                ": the target already exists");
  fsync_directory_tree(tmp_dir);
  TESSERA_CHECK(::rename(tmp_dir.c_str(), target.c_str()) == 0, "rename ", tmp_dir, " -> ", target,
                ": ", errno_text());
  fsync_path(parent_of(target), true);
}

std::vector<char> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  TESSERA_CHECK(in.good(), "cannot open ", path, ": ", errno_text());
  std::streamsize size = in.tellg();
  TESSERA_CHECK(size >= 0, "cannot read the size of ", path);
  std::vector<char> bytes(static_cast<size_t>(size));
  in.seekg(0);
  TESSERA_CHECK(size == 0 || in.read(bytes.data(), size), "reading ", path, " failed at ",
                in.gcount(), " of ", size, " bytes");
  return bytes;
}

std::string read_text_file(const std::string& path) {
  std::vector<char> bytes = read_file(path);
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace tessera
