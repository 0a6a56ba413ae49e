#pragma once
// Gpt2Tokenizer: GPT-2's own vocabulary from the encoder.json + vocab.bpe files OpenAI
// published, for users who have them (they are not shipped with Tessera).
//
// encoder.json maps each token, written in GPT-2's byte-to-unicode alphabet, to its id.
// The alphabet maps each byte to one printable character: bytes '!'..'~', 0xA1..0xAC and
// 0xAE..0xFF map to the character of the same code, and the other 68 bytes, in increasing order,
// to U+0100, U+0101, ... (so a space is 'Ġ' U+0120). vocab.bpe lists the merges, most important
// first, one "left right" pair per line after a "#version" line. Text is pre-tokenised with
// GPT-2's pattern (pretokenize.h: exact for ASCII), so ASCII text encodes as GPT-2 encodes it;
// a Llama 3 tokenizer.json gives the cl100k pattern and its own special tokens (Gpt2Options).

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/data/bpe_core.h"
#include "tessera/data/tokenizer.h"

namespace tessera::data {

// What a Hugging Face tokenizer.json may add to GPT-2's two files (load_tokenizer.cpp).
struct Gpt2Options {
  SplitPattern pattern = SplitPattern::gpt2;
  // Tokens that encode(text, allow_special = true) matches in text, each in the vocabulary.
  std::vector<std::string> specials = {std::string(kEndOfText)};
  std::string end_of_text = std::string(kEndOfText);  // the token eot_id() names
};

// The character (a Unicode code point) GPT-2 writes byte b as.
uint32_t gpt2_byte_to_char(uint8_t b);

class Gpt2Tokenizer final : public Tokenizer {
 public:
  // Throws tessera::Error naming the file and the line, key or id at fault: invalid JSON, a
  // duplicate token or id, ids not 0..N-1, a character outside the byte alphabet, a byte with
  // no token, a merge of unknown tokens or whose result is not in the vocabulary, a repeated
  // merge, or a missing <|endoftext|>.
  static Gpt2Tokenizer load(const std::string& encoder_json_path,
                            const std::string& vocab_bpe_path);
  // dir/encoder.json and dir/vocab.bpe.
  static Gpt2Tokenizer load_dir(const std::string& dir);
  // From the files' contents; the names are for error messages.
  static Gpt2Tokenizer parse(const std::string& encoder_json, const std::string& vocab_bpe,
                             const std::string& encoder_name, const std::string& vocab_name,
                             const Gpt2Options& options = {});

  std::string kind() const override { return "gpt2"; }
  int32_t vocab_size() const override { return int32_t(token_bytes_.size()); }
  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  std::optional<int32_t> special_id(std::string_view token) const override;
  int32_t eot_id() const override { return eot_id_; }

  int32_t num_merges() const { return merges_.size(); }

 private:
  Gpt2Tokenizer() = default;

  std::vector<std::string> token_bytes_;
  std::array<int32_t, 256> byte_ids_{};
  BpeMerges merges_;
  SpecialTokenMatcher specials_;
  SplitPattern pattern_ = SplitPattern::gpt2;
  int32_t eot_id_ = 0;
};

}  // namespace tessera::data
