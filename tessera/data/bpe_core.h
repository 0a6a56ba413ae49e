#pragma once
// The parts the byte-level BPE tokenizers share: the merge table with the encoder that applies
// it to a chunk, and the matcher that finds special-token strings in text.

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessera::data {

// Which pattern splits text into chunks before BPE (merges never cross a chunk): GPT-2's, or
// the one of OpenAI's cl100k_base that Llama 3 adopted (detail/pretokenize.h has both).
enum class SplitPattern { gpt2, cl100k };

// Merges (left id, right id) -> merged id, ranked by the order they were added. Encoding a chunk
// starts from one id per byte and repeatedly merges the adjacent pair of lowest rank, leftmost
// first, until no pair has a merge: the segmentation GPT-2's bpe() produces.
class BpeMerges {
 public:
  struct Merge {
    int32_t rank;
    int32_t merged;
  };

  // False (and nothing added) if the pair already has a merge.
  bool add(int32_t left, int32_t right, int32_t merged);
  std::optional<Merge> find(int32_t left, int32_t right) const;
  int32_t size() const { return int32_t(table_.size()); }

  // Appends the ids of chunk (non-empty) to out; byte_ids maps each byte to its id.
  void encode_chunk(std::string_view chunk, const std::array<int32_t, 256>& byte_ids,
                    std::vector<int32_t>& out) const;

 private:
  // Chunks up to this many bytes are merged in stack arrays; longer ones through a heap.
  static constexpr size_t kShortChunk = 64;
  void encode_short(std::string_view chunk, const std::array<int32_t, 256>& byte_ids,
                    std::vector<int32_t>& out) const;
  void encode_long(std::string_view chunk, const std::array<int32_t, 256>& byte_ids,
                   std::vector<int32_t>& out) const;

  static uint64_t key(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }
  std::unordered_map<uint64_t, Merge> table_;
};

// Finds special-token strings in text. At one position the longest special token wins; across
// positions the earliest occurrence wins.
class SpecialTokenMatcher {
 public:
  SpecialTokenMatcher() = default;
  explicit SpecialTokenMatcher(std::vector<std::pair<std::string, int32_t>> tokens);

  bool empty() const { return tokens_.empty(); }
  const std::vector<std::pair<std::string, int32_t>>& tokens() const { return tokens_; }
  std::optional<int32_t> find_id(std::string_view token) const;

  // Walks text in order: calls ordinary(segment) for each stretch between special tokens (never
  // empty) and special(id) for each special token.
  void split(std::string_view text, const std::function<void(std::string_view)>& ordinary,
             const std::function<void(int32_t)>& special) const;

 private:
  std::vector<std::pair<std::string, int32_t>> tokens_;
};

// Byte-level BPE over text: pre-tokenised chunks (pretokenize.h) each encoded with merges; with
// allow_special, special-token strings become their ids first.
std::vector<int32_t> bpe_encode(std::string_view text, bool allow_special, const BpeMerges& merges,
                                const std::array<int32_t, 256>& byte_ids,
                                const SpecialTokenMatcher& specials,
                                SplitPattern pattern = SplitPattern::gpt2);

}  // namespace tessera::data
