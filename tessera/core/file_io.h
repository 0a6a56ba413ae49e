#pragma once
// Files that are never left half-written: data goes to a temporary file in the same folder,
// is fsynced, renamed over the target, and the folder is fsynced, so a crash leaves either the
// old file or the new one.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tessera {

// Writes bytes to path atomically. Throws tessera::Error naming the path and the failing call.
void write_file_atomic(const std::string& path, std::span<const char> bytes);
void write_file_atomic(const std::string& path, const std::string& text);

// Streams a file into place atomically: write() appends, commit() publishes it. Destroying an
// uncommitted AtomicFile removes the temporary file.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t nbytes);
  void commit();
  const std::string& path() const { return path_; }
  uint64_t bytes_written() const { return written_; }

 private:
  std::string path_, tmp_path_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

// Renames a fully written directory into place (fsyncing it and its parent). `target` must
// not exist yet.
void publish_directory(const std::string& tmp_dir, const std::string& target);
// fsyncs every regular file in dir, then dir itself.
void fsync_directory_tree(const std::string& dir);

// The whole file; throws naming the path if it cannot be read.
std::vector<char> read_file(const std::string& path);
std::string read_text_file(const std::string& path);

}  // namespace tessera
