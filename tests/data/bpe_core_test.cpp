#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tessera/data/bpe_core.h"
#include "tessera/data/bpe_tokenizer.h"

namespace tessera::data {
namespace {

// GPT-2's bpe() written plainly: find the lowest-ranked adjacent pair, merge every occurrence of
// it left to right, repeat until no pair has a merge.
std::vector<int32_t> reference_bpe(std::string_view chunk, const BpeMerges& merges) {
  std::vector<int32_t> word;
  for (char c : chunk) word.push_back(static_cast<unsigned char>(c));
  while (word.size() > 1) {
    int32_t best_rank = -1, left = 0, right = 0, merged = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      auto m = merges.find(word[i], word[i + 1]);
      if (m && (best_rank < 0 || m->rank < best_rank)) {
        best_rank = m->rank;
        left = word[i];
        right = word[i + 1];
        merged = m->merged;
      }
    }
    if (best_rank < 0) break;
    std::vector<int32_t> next;
    for (size_t i = 0; i < word.size(); ++i) {
      if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
        next.push_back(merged);
        ++i;
      } else {
        next.push_back(word[i]);
      }
    }
    word = next;
  }
  return word;
}

std::array<int32_t, 256> identity_bytes() {
  std::array<int32_t, 256> ids;
  for (int b = 0; b < 256; ++b) ids[size_t(b)] = b;
  return ids;
}

TEST(BpeMerges, ShortAndLongChunksMatchGpt2sAlgorithm) {
  // Merges learned from words over a three-letter alphabet, so long chunks have many merges.
  std::mt19937 rng(1);
  std::string corpus;
  for (int w = 0; w < 4000; ++w) {
    corpus += ' ';
    for (int k = 0, n = 1 + int(rng() % 12); k < n; ++k) corpus += char('a' + rng() % 3);
  }
  BpeTrainOptions o;
  o.vocab_size = 700;
  BpeTokenizer tok = BpeTokenizer::train(corpus, o);
  BpeMerges merges;
  for (size_t i = 0; i < tok.merges().size(); ++i) {
    ASSERT_TRUE(merges.add(tok.merges()[i].first, tok.merges()[i].second, int32_t(256 + i)));
  }
  // Lengths on both sides of the short-chunk limit (64 bytes).
  for (int t = 0; t < 600; ++t) {
    std::string chunk(1 + rng() % 300, 'a');
    for (char& c : chunk) c = char('a' + rng() % 3);
    std::vector<int32_t> got;
    merges.encode_chunk(chunk, identity_bytes(), got);
    EXPECT_EQ(got, reference_bpe(chunk, merges)) << chunk;
  }
}

TEST(BpeMerges, RepeatedPairsMergeLeftToRight) {
  BpeMerges merges;
  merges.add('a', 'a', 256);
  merges.add(256, 256, 257);
  for (size_t n : {3u, 5u, 63u, 64u, 65u, 201u}) {
    std::string chunk(n, 'a');
    std::vector<int32_t> got;
    merges.encode_chunk(chunk, identity_bytes(), got);
    EXPECT_EQ(got, reference_bpe(chunk, merges)) << n;
  }
  // "aaa": the left pair merges first, as GPT-2 does.
  std::vector<int32_t> got;
  merges.encode_chunk("aaa", identity_bytes(), got);
  EXPECT_EQ(got, (std::vector<int32_t>{256, 'a'}));
}

TEST(SpecialTokenMatcher, SplitsAroundEarliestLongestMatch) {
  SpecialTokenMatcher m({{"<a>", 1}, {"<a>b", 2}, {"zz", 3}});
  std::vector<std::string> parts;
  m.split(
      "x<a>bzzz<a><a>", [&](std::string_view s) { parts.push_back("text " + std::string(s)); },
      [&](int32_t id) { parts.push_back("id " + std::to_string(id)); });
  EXPECT_EQ(parts, (std::vector<std::string>{"text x", "id 2", "id 3", "text z", "id 1", "id 1"}));
  EXPECT_EQ(m.find_id("zz"), 3);
  EXPECT_FALSE(m.find_id("<b>").has_value());
}

}  // namespace
}  // namespace tessera::data
