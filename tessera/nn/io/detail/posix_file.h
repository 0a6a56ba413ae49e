#pragma once
// A read-only file for positioned reads (pread), so readers of large weight files copy each
// tensor straight from the file into its storage instead of holding the whole file in memory.
// Every error names the file, the offset and the byte count.

#include <cstdint>
#include <string>

namespace tessera::nn {

class PosixFile {
 public:
  explicit PosixFile(std::string path);
  ~PosixFile();
  PosixFile(const PosixFile&) = delete;
  PosixFile& operator=(const PosixFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }
  // Reads exactly n bytes at offset; a short read (the file is shorter) throws.
  void read_at(uint64_t offset, void* dst, uint64_t n) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace tessera::nn
