// Shard reading and writing. Reading maps the file and validates the header against the file
// size before any token is touched, so a truncated or foreign file fails with a clear error
// instead of a SIGBUS or garbage tokens. Decoding is little-endian on every host.

#include "tessera/data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"

namespace tessera::data {

namespace {

uint32_t load_le32(const unsigned char* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

uint32_t load_le16(const unsigned char* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8);
}

void store_le32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

// The file descriptor is closed on every path out, including throws.
class Fd {
 public:
  explicit Fd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    TESSERA_CHECK(fd_ >= 0, "cannot open token shard ", path, ": ", std::strerror(errno));
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

int64_t file_size(const Fd& fd, const std::string& path) {
  struct stat st;
  TESSERA_CHECK(::fstat(fd.get(), &st) == 0, "cannot stat token shard ", path, ": ",
                std::strerror(errno));
  TESSERA_CHECK(S_ISREG(st.st_mode), "token shard ", path, " is not a regular file");
  return int64_t(st.st_size);
}

// Validates the 1024 header bytes against the size of the file they came from.
ShardHeader parse_header(const unsigned char* bytes, int64_t size, const std::string& path) {
  ShardHeader h;
  h.magic = int32_t(load_le32(bytes));
  h.version = int32_t(load_le32(bytes + 4));
  int32_t count = int32_t(load_le32(bytes + 8));
  if (h.magic == kGpt2ShardMagic) {
    h.dtype = TokenDType::u16;
    TESSERA_CHECK(h.version == kGpt2ShardVersion, "token shard ", path,
                  ": version at byte offset 4 is ", h.version, ", expected ", kGpt2ShardVersion,
                  " for magic ", kGpt2ShardMagic, " (GPT-2, uint16 tokens)");
  } else if (h.magic == kLlama3ShardMagic) {
    h.dtype = TokenDType::u32;
    TESSERA_CHECK(h.version == kLlama3ShardVersion, "token shard ", path,
                  ": version at byte offset 4 is ", h.version, ", expected ", kLlama3ShardVersion,
                  " for magic ", kLlama3ShardMagic, " (Llama-3, uint32 tokens)");
  } else {
    detail::throw_error("token shard ", path, ": magic at byte offset 0 is ", h.magic,
                        ", expected ", kGpt2ShardMagic, " (GPT-2, uint16 tokens) or ",
                        kLlama3ShardMagic,
                        " (Llama-3, uint32 tokens); is this an llm.c token file?");
  }
  TESSERA_CHECK(count >= 0, "token shard ", path, ": token count at byte offset 8 is ", count,
                ", expected a count >= 0");
  h.num_tokens = count;
  int64_t expected = kShardHeaderBytes + h.num_tokens * token_width(h.dtype);
  TESSERA_CHECK(size == expected, "token shard ", path, ": the header (byte offset 8) says ",
                h.num_tokens, " ", token_dtype_name(h.dtype), " tokens, so the file should be ",
                expected, " bytes, but it is ", size, " bytes (",
                size < expected ? "truncated" : "trailing bytes", ")");
  return h;
}

void check_header_size(int64_t size, const std::string& path) {
  TESSERA_CHECK(size >= kShardHeaderBytes, "token shard ", path, " is truncated: ", size,
                " bytes, but the header alone is ", kShardHeaderBytes, " bytes");
}

}  // namespace

int64_t token_width(TokenDType dtype) {
  return dtype == TokenDType::u16 ? 2 : 4;
}

const char* token_dtype_name(TokenDType dtype) {
  return dtype == TokenDType::u16 ? "uint16" : "uint32";
}

TokenDType dtype_for_vocab(int64_t vocab_size) {
  TESSERA_CHECK(vocab_size > 0, "token shard: vocab size must be positive, got ", vocab_size);
  return vocab_size <= 65536 ? TokenDType::u16 : TokenDType::u32;
}

ShardHeader read_shard_header(const std::string& path) {
  Fd fd(path);
  int64_t size = file_size(fd, path);
  check_header_size(size, path);
  unsigned char bytes[kShardHeaderBytes];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = ::pread(fd.get(), bytes + got, sizeof(bytes) - got, off_t(got));
    if (n < 0 && errno == EINTR) continue;
    TESSERA_CHECK(n > 0, "reading the header of token shard ", path, " failed at byte offset ", got,
                  ": ", n == 0 ? "unexpected end of file" : std::strerror(errno));
    got += size_t(n);
  }
  return parse_header(bytes, size, path);
}

void write_shard(const std::string& path, std::span<const int32_t> tokens, TokenDType dtype) {
  TESSERA_CHECK(tokens.size() <= size_t(std::numeric_limits<int32_t>::max()), "write_shard ", path,
                ": ", tokens.size(),
                " tokens do not fit the int32 count of llm.c's header; write more shards");
  const int64_t max_id = dtype == TokenDType::u16 ? 65535 : int64_t(0x7fffffff);
  unsigned char header[kShardHeaderBytes] = {};
  bool u16 = dtype == TokenDType::u16;
  store_le32(header, uint32_t(u16 ? kGpt2ShardMagic : kLlama3ShardMagic));
  store_le32(header + 4, uint32_t(u16 ? kGpt2ShardVersion : kLlama3ShardVersion));
  store_le32(header + 8, uint32_t(tokens.size()));

  // Encoded in blocks so a shard of any size streams through a small buffer.
  const size_t width = size_t(token_width(dtype));
  std::vector<unsigned char> block(size_t(1) << 16);
  AtomicFile file(path);
  file.write(header, sizeof(header));
  size_t fill = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    int32_t id = tokens[i];
    TESSERA_CHECK(id >= 0 && id <= max_id, "write_shard ", path, ": token ", i, " is ", id,
                  ", which does not fit ", token_dtype_name(dtype), " (0..", max_id, ")");
    for (size_t b = 0; b < width; ++b) block[fill + b] = static_cast<unsigned char>(id >> (8 * b));
    fill += width;
    if (fill == block.size()) {
      file.write(block.data(), fill);
      fill = 0;
    }
  }
  file.write(block.data(), fill);
  file.commit();
}

TokenShard::TokenShard(const std::string& path) : path_(path) {
  Fd fd(path);
  int64_t size = file_size(fd, path);
  check_header_size(size, path);
  void* p = ::mmap(nullptr, size_t(size), PROT_READ, MAP_PRIVATE, fd.get(), 0);
  TESSERA_CHECK(p != MAP_FAILED, "cannot map token shard ", path, " (", size,
                " bytes): ", std::strerror(errno));
  map_ = static_cast<const unsigned char*>(p);
  map_bytes_ = size_t(size);
  try {
    header_ = parse_header(map_, size, path);
  } catch (...) {
    release();
    throw;
  }
}

TokenShard::~TokenShard() {
  release();
}

TokenShard::TokenShard(TokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      header_(other.header_),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)) {}

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    header_ = other.header_;
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
  }
  return *this;
}

void TokenShard::release() {
  if (map_ != nullptr) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

uint32_t TokenShard::at(int64_t i) const {
  TESSERA_CHECK(i >= 0 && i < size(), "token shard ", path_, ": token index ", i,
                " is outside [0, ", size(), ")");
  const unsigned char* p = map_ + kShardHeaderBytes + i * token_width(dtype());
  return dtype() == TokenDType::u16 ? load_le16(p) : load_le32(p);
}

void TokenShard::read(int64_t start, int64_t n, int64_t* out) const {
  TESSERA_CHECK(start >= 0 && n >= 0 && start <= size() - n, "token shard ", path_,
                ": cannot read tokens [", start, ", ", start + n, ") of ", size());
  const unsigned char* p = map_ + kShardHeaderBytes;
  if (dtype() == TokenDType::u16) {
    for (int64_t i = 0; i < n; ++i) out[i] = load_le16(p + 2 * (start + i));
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = load_le32(p + 4 * (start + i));
  }
}

std::vector<int32_t> TokenShard::tokens() const {
  std::vector<int32_t> out(static_cast<size_t>(size()));
  for (int64_t i = 0; i < size(); ++i) {
    uint32_t id = at(i);
    TESSERA_CHECK(id <= uint32_t(std::numeric_limits<int32_t>::max()), "token shard ", path_,
                  ": token ", i, " at byte offset ", kShardHeaderBytes + i * token_width(dtype()),
                  " is ", id, ", which does not fit int32");
    out[size_t(i)] = int32_t(id);
  }
  return out;
}

void TokenShard::check_vocab(int64_t vocab_size) const {
  for (int64_t i = 0; i < size(); ++i) {
    uint32_t id = at(i);
    TESSERA_CHECK(int64_t(id) < vocab_size, "token shard ", path_, ": token ", i,
                  " at byte offset ", kShardHeaderBytes + i * token_width(dtype()), " is ", id,
                  ", expected an id below the vocab size ", vocab_size);
  }
}

}  // namespace tessera::data
