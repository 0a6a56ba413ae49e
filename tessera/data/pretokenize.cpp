// GPT-2's split pattern as a hand-written scanner: one pass, no backtracking beyond the one
// whitespace character the (?!\S) lookahead gives back. Linear in the text.

#include "tessera/data/detail/pretokenize.h"

#include <array>
#include <cstdint>

namespace tessera::data {

namespace {

struct Range {
  uint32_t lo, hi;  // inclusive
};

constexpr Range kSpaceRanges[] = {{0x85, 0x85},     {0xA0, 0xA0},     {0x1680, 0x1680},
                                  {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                                  {0x205F, 0x205F}, {0x3000, 0x3000}};

constexpr Range kDigitRanges[] = {{0xB2, 0xB3},   {0xB9, 0xB9},   {0xBC, 0xBE},    {0x660, 0x669},
                                  {0x6F0, 0x6F9}, {0x966, 0x96F}, {0xFF10, 0xFF19}};

// Checked after spaces and digits, so their members inside these ranges keep their class.
constexpr Range kOtherRanges[] = {
    {0x80, 0xA9},     {0xAB, 0xB4},     {0xB6, 0xB9},      {0xBB, 0xBF},     {0xD7, 0xD7},
    {0xF7, 0xF7},     {0x2010, 0x2027}, {0x2030, 0x205E},  {0x20A0, 0x20CF}, {0x2190, 0x23FF},
    {0x2500, 0x27BF}, {0x3001, 0x303F}, {0xFE30, 0xFE4F},  {0xFF01, 0xFF0F}, {0xFF1A, 0xFF20},
    {0xFF3B, 0xFF40}, {0xFF5B, 0xFF65}, {0x1F000, 0x1FAFF}};

template <size_t N>
bool in_ranges(const Range (&ranges)[N], uint32_t cp) {
  for (const Range& r : ranges) {
    if (cp >= r.lo && cp <= r.hi) return true;
  }
  return false;
}

constexpr std::array<CharClass, 128> make_ascii_table() {
  std::array<CharClass, 128> t{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      t[c] = CharClass::letter;
    } else if (c >= '0' && c <= '9') {
      t[c] = CharClass::digit;
    } else if (c == ' ' || (c >= '\t' && c <= '\r')) {
      t[c] = CharClass::space;
    } else {
      t[c] = CharClass::other;
    }
  }
  return t;
}

constexpr std::array<CharClass, 128> kAscii = make_ascii_table();

CharClass classify_code_point(uint32_t cp) {
  if (in_ranges(kSpaceRanges, cp)) return CharClass::space;
  if (in_ranges(kDigitRanges, cp)) return CharClass::digit;
  if (in_ranges(kOtherRanges, cp)) return CharClass::other;
  return CharClass::letter;
}

// Decodes one well-formed UTF-8 sequence (no overlong forms, no surrogates, <= U+10FFFF) at
// pos; returns its length, or 0 if the bytes there are not one.
size_t decode_utf8(std::string_view text, size_t pos, uint32_t* cp) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char b0 = byte(pos);
  size_t len;
  uint32_t min;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, min = 0x80, *cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, min = 0x800, *cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, min = 0x10000, *cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (pos + len > text.size()) return 0;
  for (size_t i = 1; i < len; ++i) {
    unsigned char b = byte(pos + i);
    if ((b & 0xC0) != 0x80) return 0;
    *cp = (*cp << 6) | (b & 0x3F);
  }
  if (*cp < min || *cp > 0x10FFFF || (*cp >= 0xD800 && *cp <= 0xDFFF)) return 0;
  return len;
}

// GPT-2's contractions, matched case-sensitively right after an apostrophe.
size_t contraction_length(std::string_view text, size_t pos) {
  std::string_view rest = text.substr(pos + 1);
  for (std::string_view suffix : {"re", "ve", "ll"}) {
    if (rest.starts_with(suffix)) return 3;
  }
  if (!rest.empty() && (rest[0] == 's' || rest[0] == 't' || rest[0] == 'm' || rest[0] == 'd')) {
    return 2;
  }
  return 0;
}

}  // namespace

CharClass classify_char(std::string_view text, size_t pos, size_t* length) {
  unsigned char b = static_cast<unsigned char>(text[pos]);
  if (b < 0x80) {
    *length = 1;
    return kAscii[b];
  }
  uint32_t cp = 0;
  size_t len = decode_utf8(text, pos, &cp);
  if (len == 0) {
    *length = 1;
    return CharClass::letter;
  }
  *length = len;
  return classify_code_point(cp);
}

bool is_valid_utf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    uint32_t cp = 0;
    size_t len = static_cast<unsigned char>(text[pos]) < 0x80 ? 1 : decode_utf8(text, pos, &cp);
    if (len == 0) return false;
    pos += len;
  }
  return true;
}

size_t next_pretoken_end(std::string_view text, size_t pos, SplitPattern pattern) {
  if (pattern == SplitPattern::cl100k) return next_cl100k_pretoken_end(text, pos);
  const size_t n = text.size();
  if (text[pos] == '\'') {
    size_t len = contraction_length(text, pos);
    if (len > 0) return pos + len;
  }
  size_t len = 0;
  CharClass cls = classify_char(text, pos, &len);
  size_t start = pos;
  // " ?X+": one optional plain space before a run of letters, digits or other characters.
  if (text[pos] == ' ' && pos + 1 < n) {
    size_t next_len = 0;
    CharClass next = classify_char(text, pos + 1, &next_len);
    if (next != CharClass::space) {
      cls = next;
      start = pos + 1;
    }
  }
  if (cls != CharClass::space) {
    size_t end = start;
    while (end < n && classify_char(text, end, &len) == cls) end += len;
    return end;
  }
  // A whitespace run. "\s+(?!\S)" takes it all at the end of the text, or all but its last
  // character when a non-space follows (that character then prefixes the next chunk); a single
  // whitespace character before a non-space is "\s+" alone.
  size_t end = pos, last = pos;
  while (end < n && classify_char(text, end, &len) == CharClass::space) {
    last = end;
    end += len;
  }
  if (end == n || last == pos) return end;
  return last;
}

std::vector<std::string_view> pretokenize(std::string_view text, SplitPattern pattern) {
  std::vector<std::string_view> chunks;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = next_pretoken_end(text, pos, pattern);
    chunks.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return chunks;
}

}  // namespace tessera::data
