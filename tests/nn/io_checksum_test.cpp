// The checkpoint checksum: independent of how the stream is split, sensitive to every bit.

#include <gtest/gtest.h>

#include <string>

#include "tessera/nn/io/detail/checksum.h"
#include "tests/nn/io_test_util.h"

namespace tessera::nn {
namespace {

std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = char((i * 131 + 7) % 251);
  return s;
}

uint64_t whole(const std::string& s) {
  Checksum c;
  c.update(s.data(), s.size());
  return c.digest();
}

TEST(Checksum, DoesNotDependOnHowTheStreamIsSplit) {
  const std::string s = pattern(1000);
  const uint64_t expected = whole(s);
  for (size_t step : {1, 3, 7, 31, 32, 33, 100, 999}) {
    Checksum c;
    for (size_t i = 0; i < s.size(); i += step)
      c.update(s.data() + i, std::min(step, s.size() - i));
    EXPECT_EQ(c.digest(), expected) << "chunks of " << step;
  }
  testing::TempDir dir;
  testing::write_bytes(dir.file("f"), s);
  EXPECT_EQ(file_checksum(dir.file("f")), expected);
  EXPECT_EQ(checksum_hex(0x0123456789abcdefull), "0123456789abcdef");
}

TEST(Checksum, EveryBitAndTheLengthMatter) {
  for (size_t n : {0, 5, 32, 77}) {
    const std::string s = pattern(n);
    const uint64_t base = whole(s);
    EXPECT_NE(whole(s + std::string(1, '\0')), base) << "a trailing zero byte changes it";
    for (size_t i = 0; i < n; ++i)
      for (int bit = 0; bit < 8; ++bit) {
        std::string t = s;
        t[i] ^= char(1 << bit);
        ASSERT_NE(whole(t), base) << "byte " << i << " bit " << bit;
      }
  }
}

}  // namespace
}  // namespace tessera::nn
