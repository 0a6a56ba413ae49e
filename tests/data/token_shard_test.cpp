#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <vector>

#include "data/data_test_util.h"
#include "tessera/core/file_io.h"
#include "tessera/data/token_shard.h"

namespace tessera::data {
namespace {

using testing::expect_error;
using testing::TempDir;
using testing::write_bytes;

void put_le32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(char((v >> (8 * i)) & 0xff));
}

// A shard byte by byte, as llm.c's write_datafile lays it out: 256 little-endian int32 (magic,
// version, count, zeros), then the tokens little-endian.
std::string llmc_shard_bytes(int32_t magic, int32_t version, int32_t count,
                             const std::vector<uint32_t>& tokens, int width) {
  std::string s;
  put_le32(s, uint32_t(magic));
  put_le32(s, uint32_t(version));
  put_le32(s, uint32_t(count));
  s.append(253 * 4, '\0');
  for (uint32_t t : tokens) {
    for (int i = 0; i < width; ++i) s.push_back(char((t >> (8 * i)) & 0xff));
  }
  return s;
}

std::string file_bytes(const std::string& path) {
  std::vector<char> b = read_file(path);
  return std::string(b.begin(), b.end());
}

TEST(TokenShard, Uint16RoundTrip) {
  TempDir dir;
  std::vector<int32_t> tokens = {0, 1, 50256, 65535, 42, 7};
  write_shard(dir.file("a.bin"), tokens, TokenDType::u16);
  ShardHeader h = read_shard_header(dir.file("a.bin"));
  EXPECT_EQ(h.magic, kGpt2ShardMagic);
  EXPECT_EQ(h.version, kGpt2ShardVersion);
  EXPECT_EQ(h.num_tokens, 6);
  EXPECT_EQ(h.dtype, TokenDType::u16);
  EXPECT_EQ(std::filesystem::file_size(dir.file("a.bin")), 1024u + 2u * 6u);
  TokenShard shard(dir.file("a.bin"));
  EXPECT_EQ(shard.tokens(), tokens);
  std::vector<int64_t> window(3);
  shard.read(2, 3, window.data());
  EXPECT_EQ(window, (std::vector<int64_t>{50256, 65535, 42}));
}

TEST(TokenShard, Uint32RoundTrip) {
  TempDir dir;
  std::vector<int32_t> tokens = {0, 65536, 128255, 2147483647, 3};
  write_shard(dir.file("b.bin"), tokens, TokenDType::u32);
  TokenShard shard(dir.file("b.bin"));
  EXPECT_EQ(shard.header().magic, kLlama3ShardMagic);
  EXPECT_EQ(shard.header().version, kLlama3ShardVersion);
  EXPECT_EQ(shard.dtype(), TokenDType::u32);
  EXPECT_EQ(shard.tokens(), tokens);
  EXPECT_EQ(std::filesystem::file_size(dir.file("b.bin")), 1024u + 4u * 5u);
}

TEST(TokenShard, EmptyShardRoundTrips) {
  TempDir dir;
  write_shard(dir.file("e.bin"), {}, TokenDType::u16);
  TokenShard shard(dir.file("e.bin"));
  EXPECT_EQ(shard.size(), 0);
  EXPECT_TRUE(shard.tokens().empty());
}

TEST(TokenShard, ReadsBytesLaidOutAsLlmcWritesThem) {
  TempDir dir;
  std::string gpt2 = llmc_shard_bytes(20240520, 1, 4, {0x0102, 0xfffe, 0, 50256}, 2);
  write_bytes(dir.file("gpt2.bin"), gpt2);
  TokenShard a(dir.file("gpt2.bin"));
  EXPECT_EQ(a.tokens(), (std::vector<int32_t>{0x0102, 0xfffe, 0, 50256}));
  // Our writer produces the same bytes, so llm.c reads our shards too.
  write_shard(dir.file("ours.bin"), std::vector<int32_t>{0x0102, 0xfffe, 0, 50256},
              TokenDType::u16);
  EXPECT_EQ(file_bytes(dir.file("ours.bin")), gpt2);

  std::string llama = llmc_shard_bytes(20240801, 7, 3, {128000, 0x01020304, 5}, 4);
  write_bytes(dir.file("llama.bin"), llama);
  EXPECT_EQ(TokenShard(dir.file("llama.bin")).tokens(),
            (std::vector<int32_t>{128000, 0x01020304, 5}));
  write_shard(dir.file("ours32.bin"), std::vector<int32_t>{128000, 0x01020304, 5}, TokenDType::u32);
  EXPECT_EQ(file_bytes(dir.file("ours32.bin")), llama);
}

TEST(TokenShard, DtypeFollowsVocabSize) {
  EXPECT_EQ(dtype_for_vocab(257), TokenDType::u16);
  EXPECT_EQ(dtype_for_vocab(50257), TokenDType::u16);
  EXPECT_EQ(dtype_for_vocab(65536), TokenDType::u16);  // ids 0..65535 all fit
  EXPECT_EQ(dtype_for_vocab(65537), TokenDType::u32);
  EXPECT_EQ(dtype_for_vocab(128256), TokenDType::u32);
  expect_error([] { dtype_for_vocab(0); }, {"vocab size"});
}

TEST(TokenShard, RejectsTruncatedAndCorruptFiles) {
  TempDir dir;
  std::string good = llmc_shard_bytes(20240520, 1, 4, {1, 2, 3, 4}, 2);
  auto check = [&](const std::string& name, const std::string& bytes,
                   std::initializer_list<std::string_view> parts) {
    write_bytes(dir.file(name), bytes);
    expect_error([&] { read_shard_header(dir.file(name)); }, parts);
    expect_error([&] { TokenShard s(dir.file(name)); }, parts);
  };
  check("empty.bin", "", {"empty.bin", "truncated", "0 bytes", "1024"});
  check("short_header.bin", good.substr(0, 100), {"short_header.bin", "truncated", "100 bytes"});
  check("magic.bin", llmc_shard_bytes(12345, 1, 4, {1, 2, 3, 4}, 2),
        {"magic.bin", "magic at byte offset 0 is 12345", "20240520", "20240801"});
  check("version.bin", llmc_shard_bytes(20240520, 2, 4, {1, 2, 3, 4}, 2),
        {"version.bin", "version at byte offset 4 is 2", "expected 1"});
  check("llama_version.bin", llmc_shard_bytes(20240801, 1, 1, {1}, 4),
        {"version at byte offset 4 is 1", "expected 7"});
  // The count promises more tokens than the file holds.
  check("count.bin", llmc_shard_bytes(20240520, 1, 1000, {1, 2, 3, 4}, 2),
        {"count.bin", "byte offset 8", "1000", "should be 3024 bytes", "1032 bytes", "truncated"});
  check("cut.bin", good.substr(0, good.size() - 1), {"truncated", "1031 bytes"});
  check("trailing.bin", good + "x", {"trailing bytes"});
  check("negative.bin", llmc_shard_bytes(20240520, 1, -5, {}, 2),
        {"token count at byte offset 8 is -5"});
  // A Llama-3 header over 2-byte tokens: the size does not match 4-byte tokens.
  check("width.bin", llmc_shard_bytes(20240801, 7, 4, {1, 2, 3, 4}, 2),
        {"uint32", "should be 1040 bytes"});

  expect_error([&] { TokenShard s(dir.file("missing.bin")); }, {"missing.bin", "cannot open"});
  expect_error([&] { read_shard_header(dir.path()); }, {"not a regular file"});
}

// Random header damage and truncation: the shard either opens with a consistent size or the
// reader throws tessera::Error; it never crashes or reads past the file.
TEST(TokenShard, SurvivesRandomCorruption) {
  TempDir dir;
  std::string good = llmc_shard_bytes(20240520, 1, 6, {1, 2, 3, 4, 5, 6}, 2);
  std::mt19937 rng(9);
  for (int t = 0; t < 300; ++t) {
    std::string bytes = good;
    if (t % 2 == 0) {
      bytes[rng() % 12] = char(rng() % 256);
    } else {
      bytes.resize(rng() % (good.size() + 1));
    }
    write_bytes(dir.file("fuzz.bin"), bytes);
    try {
      TokenShard shard(dir.file("fuzz.bin"));
      EXPECT_EQ(int64_t(bytes.size()), 1024 + shard.size() * token_width(shard.dtype()));
      for (int64_t i = 0; i < shard.size(); ++i) shard.at(i);
    } catch (const Error&) {
    }
  }
}

TEST(TokenShard, ChecksIdsAgainstVocab) {
  TempDir dir;
  write_shard(dir.file("v.bin"), std::vector<int32_t>{5, 9, 300, 2}, TokenDType::u16);
  TokenShard shard(dir.file("v.bin"));
  shard.check_vocab(301);
  expect_error([&] { shard.check_vocab(257); },
               {"v.bin", "token 2 at byte offset 1028 is 300", "vocab size 257"});
  expect_error([&] { shard.at(4); }, {"token index 4"});
  std::vector<int64_t> out(3);
  expect_error([&] { shard.read(2, 3, out.data()); }, {"cannot read tokens [2, 5) of 4"});
}

TEST(TokenShard, WriteRejectsTokensThatDoNotFitAndLeavesNoTrace) {
  TempDir dir;
  std::vector<int32_t> old = {1, 2, 3};
  write_shard(dir.file("s.bin"), old, TokenDType::u16);
  expect_error(
      [&] {
        write_shard(dir.file("s.bin"), std::vector<int32_t>{1, 70000}, TokenDType::u16);
      },
      {"s.bin", "token 1 is 70000", "uint16"});
  expect_error([&] { write_shard(dir.file("s.bin"), std::vector<int32_t>{-1}, TokenDType::u32); },
               {"token 0 is -1"});
  // The failed writes left the old shard intact and no temporary file behind.
  EXPECT_EQ(TokenShard(dir.file("s.bin")).tokens(), old);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
  // A successful write replaces the shard.
  write_shard(dir.file("s.bin"), std::vector<int32_t>{9}, TokenDType::u32);
  EXPECT_EQ(TokenShard(dir.file("s.bin")).tokens(), std::vector<int32_t>{9});
}

TEST(TokenShard, MovesOwnership) {
  TempDir dir;
  write_shard(dir.file("m.bin"), std::vector<int32_t>{4, 5}, TokenDType::u16);
  TokenShard a(dir.file("m.bin"));
  TokenShard b(std::move(a));
  EXPECT_EQ(b.at(1), 5u);
  TokenShard c(dir.file("m.bin"));
  c = std::move(b);
  EXPECT_EQ(c.at(0), 4u);
}

}  // namespace
}  // namespace tessera::data
