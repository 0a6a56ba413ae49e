#pragma once
// Tokenizers turn text into token ids and back. Every tokenizer here is byte-level: any byte
// string encodes, and decode(encode(text)) == text exactly. Special tokens such as
// "<|endoftext|>" have ids of their own and are matched in the text only when asked.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // "byte", "bpe", "gpt2"
  virtual std::string kind() const = 0;
  // Ids are in [0, vocab_size()).
  virtual int32_t vocab_size() const = 0;
  // With allow_special, occurrences of special-token strings in the text become their ids;
  // otherwise they are encoded as ordinary bytes.
  virtual std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const = 0;
  // Throws tessera::Error naming the position of an id outside [0, vocab_size()).
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // The id of a special token, if this tokenizer has it.
  virtual std::optional<int32_t> special_id(std::string_view token) const = 0;
  // The end-of-text id documents are separated by.
  virtual int32_t eot_id() const = 0;
};

// Bytes are ids 0..255; <|endoftext|> is 256. Needs no training and no files.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int32_t kEot = 256;
  std::string kind() const override { return "byte"; }
  int32_t vocab_size() const override { return 257; }
  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  std::optional<int32_t> special_id(std::string_view token) const override;
  int32_t eot_id() const override { return kEot; }
};

inline constexpr std::string_view kEndOfText = "<|endoftext|>";

}  // namespace tessera::data
