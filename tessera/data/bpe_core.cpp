// Chunk encoding. Most chunks are a word of a few bytes: those are merged in place in stack
// arrays, rescanning the pair ranks for the lowest (O(n^2) in theory, a handful of hash lookups
// and no allocation in practice). Longer chunks keep the symbols in a linked list and the
// candidate merges in a min-heap of (rank, position), O(n log n), so a long run of letters or
// spaces cannot stall encoding. Heap entries are checked when popped (the pair at that position
// must still have that rank), so stale entries are simply skipped. Both orders merge the lowest
// rank first and, within a rank, the leftmost first: GPT-2's result.

#include "tessera/data/bpe_core.h"

#include <algorithm>
#include <limits>
#include <queue>

#include "tessera/core/error.h"
#include "tessera/data/detail/pretokenize.h"

namespace tessera::data {

bool BpeMerges::add(int32_t left, int32_t right, int32_t merged) {
  return table_.emplace(key(left, right), Merge{int32_t(table_.size()), merged}).second;
}

std::optional<BpeMerges::Merge> BpeMerges::find(int32_t left, int32_t right) const {
  auto it = table_.find(key(left, right));
  if (it == table_.end()) return std::nullopt;
  return it->second;
}

void BpeMerges::encode_chunk(std::string_view chunk, const std::array<int32_t, 256>& byte_ids,
                             std::vector<int32_t>& out) const {
  if (chunk.size() == 1) {
    out.push_back(byte_ids[static_cast<unsigned char>(chunk[0])]);
  } else if (chunk.size() <= kShortChunk) {
    encode_short(chunk, byte_ids, out);
  } else {
    encode_long(chunk, byte_ids, out);
  }
}

void BpeMerges::encode_short(std::string_view chunk, const std::array<int32_t, 256>& byte_ids,
                             std::vector<int32_t>& out) const {
  constexpr int32_t kNone = std::numeric_limits<int32_t>::max();
  std::array<int32_t, kShortChunk> id;
  std::array<int32_t, kShortChunk> rank;  // rank[i]: the merge of (id[i], id[i + 1]), or kNone
  size_t n = chunk.size();
  for (size_t i = 0; i < n; ++i) id[i] = byte_ids[static_cast<unsigned char>(chunk[i])];
  auto rank_at = [&](size_t i) {
    auto m = find(id[i], id[i + 1]);
    return m ? m->rank : kNone;
  };
  for (size_t i = 0; i + 1 < n; ++i) rank[i] = rank_at(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (rank[i] < rank[best]) best = i;
    }
    if (rank[best] == kNone) break;
    id[best] = find(id[best], id[best + 1])->merged;
    // Remove symbol best + 1; ranks exist for the first n - 1 symbols only.
    for (size_t i = best + 1; i + 1 < n; ++i) id[i] = id[i + 1];
    for (size_t i = best + 1; i + 2 < n; ++i) rank[i] = rank[i + 1];
    --n;
    if (best > 0) rank[best - 1] = rank_at(best - 1);
    if (best + 1 < n) rank[best] = rank_at(best);
  }
  out.insert(out.end(), id.begin(), id.begin() + std::ptrdiff_t(n));
}

void BpeMerges::encode_long(std::string_view chunk, const std::array<int32_t, 256>& byte_ids,
                            std::vector<int32_t>& out) const {
  const size_t n = chunk.size();
  // Positions share a 64-bit heap key with the rank.
  TESSERA_CHECK(n < (size_t(1) << 32), "BPE encode: a chunk of ", n,
                " bytes is too long (at most 2^32 - 1)");
  std::vector<int32_t> id(n);
  std::vector<int64_t> next(n);
  std::vector<int64_t> prev(n);
  for (size_t i = 0; i < n; ++i) {
    id[i] = byte_ids[static_cast<unsigned char>(chunk[i])];
    next[i] = i + 1 < n ? int64_t(i + 1) : -1;
    prev[i] = int64_t(i) - 1;
  }
  // (rank << 32 | position): the lowest rank first, then the leftmost.
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<>> heap;
  auto push = [&](int64_t pos) {
    if (pos < 0 || next[pos] < 0) return;
    if (auto m = find(id[pos], id[next[pos]])) heap.push((uint64_t(m->rank) << 32) | uint64_t(pos));
  };
  for (size_t i = 0; i + 1 < n; ++i) push(int64_t(i));
  while (!heap.empty()) {
    uint64_t top = heap.top();
    heap.pop();
    int64_t pos = int64_t(top & 0xffffffffu);
    int32_t rank = int32_t(top >> 32);
    if (id[pos] < 0 || next[pos] < 0) continue;
    auto m = find(id[pos], id[next[pos]]);
    if (!m || m->rank != rank) continue;
    int64_t right = next[pos];
    id[pos] = m->merged;
    id[right] = -1;
    next[pos] = next[right];
    if (next[pos] >= 0) prev[next[pos]] = pos;
    push(prev[pos]);
    push(pos);
  }
  for (int64_t i = 0; i >= 0; i = next[i]) out.push_back(id[i]);
}

SpecialTokenMatcher::SpecialTokenMatcher(std::vector<std::pair<std::string, int32_t>> tokens)
    : tokens_(std::move(tokens)) {
  for (const auto& [text, id] : tokens_) {
    TESSERA_CHECK(!text.empty(), "special tokens: the token with id ", id, " is empty");
  }
}

std::optional<int32_t> SpecialTokenMatcher::find_id(std::string_view token) const {
  for (const auto& [text, id] : tokens_) {
    if (text == token) return id;
  }
  return std::nullopt;
}

void SpecialTokenMatcher::split(std::string_view text,
                                const std::function<void(std::string_view)>& ordinary,
                                const std::function<void(int32_t)>& special) const {
  // The next occurrence of each token at or after pos; each search moves only forward, so the
  // whole walk is O(text * tokens).
  std::vector<size_t> next(tokens_.size());
  for (size_t k = 0; k < tokens_.size(); ++k) next[k] = text.find(tokens_[k].first);
  size_t pos = 0;
  while (true) {
    size_t best = std::string_view::npos, best_k = 0;
    for (size_t k = 0; k < tokens_.size(); ++k) {
      if (next[k] < best || (next[k] == best && next[k] != std::string_view::npos &&
                             tokens_[k].first.size() > tokens_[best_k].first.size())) {
        best = next[k];
        best_k = k;
      }
    }
    if (best == std::string_view::npos) break;
    if (best > pos) ordinary(text.substr(pos, best - pos));
    special(tokens_[best_k].second);
    pos = best + tokens_[best_k].first.size();
    for (size_t k = 0; k < tokens_.size(); ++k) {
      if (next[k] != std::string_view::npos && next[k] < pos)
        next[k] = text.find(tokens_[k].first, pos);
    }
  }
  if (pos < text.size()) ordinary(text.substr(pos));
}

std::vector<int32_t> bpe_encode(std::string_view text, bool allow_special, const BpeMerges& merges,
                                const std::array<int32_t, 256>& byte_ids,
                                const SpecialTokenMatcher& specials, SplitPattern pattern) {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  auto ordinary = [&](std::string_view segment) {
    size_t pos = 0;
    while (pos < segment.size()) {
      size_t end = next_pretoken_end(segment, pos, pattern);
      merges.encode_chunk(segment.substr(pos, end - pos), byte_ids, ids);
      pos = end;
    }
  };
  if (allow_special) {
    specials.split(text, ordinary, [&](int32_t id) { ids.push_back(id); });
  } else {
    ordinary(text);
  }
  return ids;
}

}  // namespace tessera::data
