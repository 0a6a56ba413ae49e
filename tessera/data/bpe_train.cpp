// BPE training with incremental pair counts. The corpus is pre-tokenised once into distinct
// chunks with their frequencies ("words"); pair counts are kept per pair, with the list of words
// each pair occurs in. A merge touches only the words that contain its pair: their old pairs are
// subtracted and their new pairs added. The next merge comes from a max-heap of (count, pair)
// whose stale entries are skipped when popped. Cost per merge is proportional to the words it
// touches, not to the corpus, so a few-MB corpus trains a 4-8k vocabulary in seconds.

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "tessera/core/error.h"
#include "tessera/data/bpe_tokenizer.h"
#include "tessera/data/detail/pretokenize.h"

namespace tessera::data {

namespace {

struct Word {
  std::vector<int32_t> symbols;
  int64_t freq;
};

uint64_t pair_key(int32_t left, int32_t right) {
  return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
}

struct HeapEntry {
  int64_t count;
  uint64_t pair;
};

// Highest count first; among equal counts the smaller (left, right) pair first.
struct LowerPriority {
  bool operator()(const HeapEntry& a, const HeapEntry& b) const {
    return a.count < b.count || (a.count == b.count && a.pair > b.pair);
  }
};

// Distinct chunks of the documents with their counts; special tokens split them first.
std::vector<Word> count_words(std::span<const std::string_view> documents,
                              const std::vector<std::string>& specials) {
  std::unordered_map<std::string_view, int64_t> counts;
  auto count_segment = [&](std::string_view segment) {
    size_t pos = 0;
    while (pos < segment.size()) {
      size_t end = next_pretoken_end(segment, pos);
      ++counts[segment.substr(pos, end - pos)];
      pos = end;
    }
  };
  std::vector<std::pair<std::string, int32_t>> tokens;
  for (const std::string& s : specials) tokens.emplace_back(s, int32_t(tokens.size()));
  SpecialTokenMatcher matcher(std::move(tokens));
  for (std::string_view doc : documents) matcher.split(doc, count_segment, [](int32_t) {});

  std::vector<Word> words;
  words.reserve(counts.size());
  for (const auto& [chunk, freq] : counts) {
    if (chunk.size() < 2) continue;  // a single byte has no pair to merge
    Word w{std::vector<int32_t>(chunk.size()), freq};
    for (size_t i = 0; i < chunk.size(); ++i) w.symbols[i] = static_cast<unsigned char>(chunk[i]);
    words.push_back(std::move(w));
  }
  return words;
}

// Replaces every (left, right) in symbols, left to right and non-overlapping, with merged.
void apply_merge(std::vector<int32_t>& symbols, int32_t left, int32_t right, int32_t merged) {
  size_t out = 0;
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
      symbols[out++] = merged;
      ++i;
    } else {
      symbols[out++] = symbols[i];
    }
  }
  symbols.resize(out);
}

}  // namespace

BpeTokenizer BpeTokenizer::train(std::string_view corpus, const BpeTrainOptions& options) {
  return train(std::span<const std::string_view>(&corpus, 1), options);
}

BpeTokenizer BpeTokenizer::train(std::span<const std::string_view> documents,
                                 const BpeTrainOptions& options) {
  // Validates the special tokens before any work.
  BpeTokenizer({}, options.special_tokens, options.eot_token);
  const int64_t fixed = 256 + int64_t(options.special_tokens.size());
  TESSERA_CHECK(options.vocab_size >= fixed && options.vocab_size <= (int64_t(1) << 30),
                "BPE train: vocab_size ", options.vocab_size, " must be in [256 bytes + ",
                options.special_tokens.size(), " special tokens = ", fixed, ", 2^30]");
  TESSERA_CHECK(options.min_frequency >= 1, "BPE train: min_frequency must be >= 1, got ",
                options.min_frequency);
  const int64_t target = options.vocab_size - fixed;

  std::vector<Word> words = count_words(documents, options.special_tokens);
  std::unordered_map<uint64_t, int64_t> counts;
  std::unordered_map<uint64_t, std::vector<int32_t>> where;
  for (size_t i = 0; i < words.size(); ++i) {
    const Word& w = words[i];
    for (size_t k = 0; k + 1 < w.symbols.size(); ++k) {
      uint64_t p = pair_key(w.symbols[k], w.symbols[k + 1]);
      counts[p] += w.freq;
      where[p].push_back(int32_t(i));
    }
  }
  std::priority_queue<HeapEntry, std::vector<HeapEntry>, LowerPriority> heap;
  for (const auto& [p, c] : counts) heap.push({c, p});

  std::vector<MergePair> merges;
  std::vector<uint64_t> touched;
  while (int64_t(merges.size()) < target && !heap.empty()) {
    HeapEntry top = heap.top();
    heap.pop();
    auto it = counts.find(top.pair);
    if (it == counts.end() || it->second != top.count) continue;  // stale
    if (top.count < options.min_frequency) break;
    const int32_t left = int32_t(top.pair >> 32), right = int32_t(top.pair & 0xffffffffu);
    const int32_t merged = int32_t(256 + merges.size());
    merges.emplace_back(left, right);
    counts.erase(it);
    if (options.progress) options.progress(int64_t(merges.size()), target);

    std::vector<int32_t> list = std::move(where[top.pair]);
    where.erase(top.pair);
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    touched.clear();
    for (int32_t idx : list) {
      Word& w = words[size_t(idx)];
      std::vector<int32_t>& s = w.symbols;
      bool present = false;
      for (size_t k = 0; k + 1 < s.size() && !present; ++k) {
        present = s[k] == left && s[k + 1] == right;
      }
      if (!present) continue;  // the word lost this pair to an earlier merge
      for (size_t k = 0; k + 1 < s.size(); ++k) {
        uint64_t p = pair_key(s[k], s[k + 1]);
        if (p == top.pair) continue;
        counts[p] -= w.freq;
        touched.push_back(p);
      }
      apply_merge(s, left, right, merged);
      for (size_t k = 0; k + 1 < s.size(); ++k) {
        uint64_t p = pair_key(s[k], s[k + 1]);
        counts[p] += w.freq;
        touched.push_back(p);
        if (s[k] == merged || s[k + 1] == merged) where[p].push_back(idx);
      }
    }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (uint64_t p : touched) {
      auto c = counts.find(p);
      if (c->second > 0) {
        heap.push({c->second, p});
      } else {
        counts.erase(c);
        where.erase(p);
      }
    }
  }
  return BpeTokenizer(std::move(merges), options.special_tokens, options.eot_token);
}

}  // namespace tessera::data
