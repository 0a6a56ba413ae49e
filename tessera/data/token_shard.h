#pragma once
// Token shards in llm.c's format, so shards made by llm.c's scripts load here and ours load
// there. A shard is a header of 256 little-endian int32 followed by the tokens:
//   header[0] magic, header[1] version, header[2] number of tokens, the rest zero;
//   magic 20240520 version 1: GPT-2 shards, uint16 tokens;
//   magic 20240801 version 7: llm.c's Llama-3 shards, uint32 tokens.
// The file size must be exactly 1024 + count * token width, as llm.c's loader requires.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tessera::data {

enum class TokenDType { u16, u32 };

inline constexpr int32_t kShardHeaderInts = 256;
inline constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;
inline constexpr int32_t kGpt2ShardMagic = 20240520;
inline constexpr int32_t kGpt2ShardVersion = 1;
inline constexpr int32_t kLlama3ShardMagic = 20240801;
inline constexpr int32_t kLlama3ShardVersion = 7;

// 2 or 4.
int64_t token_width(TokenDType dtype);
// "uint16" or "uint32".
const char* token_dtype_name(TokenDType dtype);
// uint16 when every id of a vocabulary of this size fits (vocab_size <= 65536), else uint32.
TokenDType dtype_for_vocab(int64_t vocab_size);

struct ShardHeader {
  int32_t magic = kGpt2ShardMagic;
  int32_t version = kGpt2ShardVersion;
  int64_t num_tokens = 0;
  TokenDType dtype = TokenDType::u16;
};

// Reads and validates the header of the shard at path against its file size. Throws
// tessera::Error naming the file, the byte offset and the expected value.
ShardHeader read_shard_header(const std::string& path);

// Writes tokens as a shard, atomically. Throws naming the position of a token that is negative
// or does not fit dtype, or when there are 2^31 tokens or more (the header holds an int32).
void write_shard(const std::string& path, std::span<const int32_t> tokens, TokenDType dtype);

// A validated shard, memory-mapped read-only. Move-only.
class TokenShard {
 public:
  explicit TokenShard(const std::string& path);
  ~TokenShard();
  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;

  const std::string& path() const { return path_; }
  const ShardHeader& header() const { return header_; }
  int64_t size() const { return header_.num_tokens; }
  TokenDType dtype() const { return header_.dtype; }

  // Token i (bounds-checked).
  uint32_t at(int64_t i) const;
  // Tokens [start, start + n) widened to int64, into out. Throws if the range is outside.
  void read(int64_t start, int64_t n, int64_t* out) const;
  std::vector<int32_t> tokens() const;
  // Throws naming the file, the token index and its byte offset when an id is >= vocab_size.
  void check_vocab(int64_t vocab_size) const;

 private:
  void release();

  std::string path_;
  ShardHeader header_;
  const unsigned char* map_ = nullptr;
  size_t map_bytes_ = 0;
};

}  // namespace tessera::data
