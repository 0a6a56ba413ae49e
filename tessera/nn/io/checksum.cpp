#include "tessera/nn/io/detail/checksum.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "tessera/nn/io/detail/posix_file.h"

namespace tessera::nn {

namespace {

// Odd 64-bit constants with well-mixed bits (the fractional bits of sqrt(2), sqrt(3) and
// sqrt(5), made odd). Any such constants work; these are fixed so that a checksum written by
// one build is checked by another.
constexpr uint64_t kMul1 = 0x6a09e667f3bcc909ull;
constexpr uint64_t kMul2 = 0xbb67ae8584caa73bull;
constexpr uint64_t kMul3 = 0x3c6ef372fe94f82bull;

uint64_t load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint64_t mix(uint64_t lane, uint64_t word) {
  return std::rotl(lane ^ (word * kMul1), 29) * kMul2;
}

// Spreads every input bit over the whole output.
uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kMul2;
  h ^= h >> 29;
  h *= kMul3;
  h ^= h >> 32;
  return h;
}

}  // namespace

Checksum::Checksum() : lanes_{kMul1, kMul2, kMul3, kMul1 ^ kMul2} {}

void Checksum::block(const unsigned char* p) {
  for (int i = 0; i < 4; ++i) lanes_[i] = mix(lanes_[i], load64(p + 8 * i));
}

void Checksum::update(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  length_ += n;
  if (pending_size_ > 0) {
    size_t take = std::min(n, pending_.size() - pending_size_);
    std::memcpy(pending_.data() + pending_size_, p, take);
    pending_size_ += take;
    p += take;
    n -= take;
    if (pending_size_ < pending_.size()) return;
    block(pending_.data());
    pending_size_ = 0;
  }
  for (; n >= 32; p += 32, n -= 32) block(p);
  std::memcpy(pending_.data(), p, n);
  pending_size_ = n;
}

uint64_t Checksum::digest() const {
  // The tail, zero-padded, goes through lane 0; the length separates streams that differ only
  // in trailing zero bytes.
  std::array<uint64_t, 4> lanes = lanes_;
  unsigned char tail[32] = {};
  std::memcpy(tail, pending_.data(), pending_size_);
  for (size_t i = 0; i * 8 < pending_size_; ++i) lanes[0] = mix(lanes[0], load64(tail + 8 * i));
  uint64_t h = length_ * kMul3;
  for (uint64_t lane : lanes) h = std::rotl(h ^ avalanche(lane), 27) * kMul1 + kMul2;
  return avalanche(h);
}

uint64_t file_checksum(const std::string& path) {
  PosixFile f(path);
  Checksum sum;
  std::vector<char> chunk(size_t(4) << 20);
  for (uint64_t offset = 0; offset < f.size(); offset += chunk.size()) {
    uint64_t n = std::min<uint64_t>(chunk.size(), f.size() - offset);
    f.read_at(offset, chunk.data(), n);
    sum.update(chunk.data(), n);
  }
  return sum.digest();
}

std::string checksum_hex(uint64_t value) {
  static const char* digits = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, value >>= 4) s[i] = digits[value & 15];
  return s;
}

}  // namespace tessera::nn
