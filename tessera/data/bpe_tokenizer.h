#pragma once
// BpeTokenizer: a byte-level BPE trained here. Ids 0..255 are the bytes, merge i makes id
// 256 + i, and the special tokens follow the merges. Text is pre-tokenised with GPT-2's pattern
// (pretokenize.h), so merges never cross a word, digit-run or whitespace boundary, and never a
// special token. Any byte string encodes, and decode(encode(text)) == text exactly.
//
// Saved as JSON:
//   {"format": "tessera-bpe", "version": 1, "pretokenizer": "gpt2-pattern",
//    "vocab_size": 4096, "merges": [[116, 104], [256, 101], ...],
//    "special_tokens": ["<|endoftext|>"], "eot_token": "<|endoftext|>"}
// where each merge names the two ids it joins (both below its own id).

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tessera/data/bpe_core.h"
#include "tessera/data/tokenizer.h"

namespace tessera::data {

struct BpeTrainOptions {
  // The whole vocabulary: 256 bytes + merges + special tokens. Training stops earlier when no
  // pair occurs min_frequency times.
  int64_t vocab_size = 4096;
  std::vector<std::string> special_tokens = {std::string(kEndOfText)};
  std::string eot_token = std::string(kEndOfText);
  int64_t min_frequency = 2;
  // Called after each merge with the merges made and the most there can be (vocab_size less
  // the bytes and specials); `tessera tokenizer train` draws its progress line from it.
  std::function<void(int64_t merges, int64_t target)> progress;
};

class BpeTokenizer final : public Tokenizer {
 public:
  using MergePair = std::pair<int32_t, int32_t>;

  // Validates: each merge joins ids below its own, no merge repeats, special tokens are
  // non-empty and distinct, and eot_token is one of them. Throws naming the offender.
  BpeTokenizer(std::vector<MergePair> merges, std::vector<std::string> special_tokens,
               std::string eot_token);

  // Learns merges from corpus by pair counts: the most frequent pair is merged next, ties going
  // to the smaller (left id, right id). Special-token strings in the corpus are boundaries and
  // are never merged into. Deterministic: the same corpus and options give the same merges.
  static BpeTokenizer train(std::string_view corpus, const BpeTrainOptions& options);
  // The same over several documents (files); no merge crosses from one document into the next.
  static BpeTokenizer train(std::span<const std::string_view> documents,
                            const BpeTrainOptions& options);

  nlohmann::json to_json() const;
  // `source` names the file in error messages.
  static BpeTokenizer from_json(const nlohmann::json& j, const std::string& source);
  // Writes the JSON atomically.
  void save(const std::string& path) const;
  static BpeTokenizer load(const std::string& path);

  std::string kind() const override { return "bpe"; }
  int32_t vocab_size() const override { return int32_t(token_bytes_.size()); }
  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  std::optional<int32_t> special_id(std::string_view token) const override;
  int32_t eot_id() const override { return eot_id_; }

  const std::vector<MergePair>& merges() const { return merges_; }
  const std::vector<std::string>& special_tokens() const { return special_tokens_; }
  // The bytes token id stands for.
  const std::string& token_bytes(int32_t id) const;

 private:
  std::vector<MergePair> merges_;
  std::vector<std::string> special_tokens_;
  std::string eot_token_;
  int32_t eot_id_ = 0;
  BpeMerges table_;
  SpecialTokenMatcher specials_;
  std::array<int32_t, 256> byte_ids_{};
  std::vector<std::string> token_bytes_;
};

}  // namespace tessera::data
