#pragma once
// A 64-bit checksum of a byte stream, to catch checkpoint files that were corrupted or swapped
// after they were written (bit rot, a partial copy, a file from another checkpoint) when the
// damage still parses. Not cryptographic: it guards against accidents, not adversaries.
//
// Four independent lanes of multiply-rotate over 8-byte words keep the CPU's multipliers busy,
// so hashing runs near memory bandwidth; the result does not depend on how the stream is split
// into update() calls.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tessera::nn {

class Checksum {
 public:
  Checksum();
  void update(const void* data, size_t n);
  uint64_t digest() const;

 private:
  void block(const unsigned char* p);  // 32 bytes, one word per lane

  std::array<uint64_t, 4> lanes_;
  std::array<unsigned char, 32> pending_{};
  size_t pending_size_ = 0;
  uint64_t length_ = 0;
};

// The checksum of a whole file, read in chunks; throws naming the file if it cannot be read.
uint64_t file_checksum(const std::string& path);
// 16 lowercase hex digits.
std::string checksum_hex(uint64_t value);

}  // namespace tessera::nn
