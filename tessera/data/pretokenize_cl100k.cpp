// The cl100k_base / Llama 3 split pattern as a hand-written scanner over pretokenize.h's
// character classes. The alternatives are tried in the regex's order (leftmost first, as
// Oniguruma and tiktoken's regex engine take them), each written out:
//   1 (?i:'s|'t|'re|'ve|'m|'ll|'d)      a contraction, any case
//   2 [^\r\n\p{L}\p{N}]?\p{L}+          letters, with one leading character that is not a
//                                       newline, letter or digit (" word", "(word", "\tword")
//   3 \p{N}{1,3}                        up to three digits
//   4  ?[^\s\p{L}\p{N}]+[\r\n]*         punctuation and symbols, an optional leading space,
//                                       the newlines right after
//   5 \s*[\r\n]+                        whitespace up to and including its last newline
//   6 \s+(?!\S)                         whitespace, less its last character before a non-space
//   7 \s+                               a single whitespace character before a non-space
// Linear in the text: no alternative looks further than the run it takes plus one character.

#include <string_view>

#include "tessera/data/detail/pretokenize.h"

namespace tessera::data {

namespace {

char lower(char c) { return c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c; }

// 's 't 're 've 'm 'll 'd in any case, after the apostrophe at pos; 0 when none.
size_t contraction_length_any_case(std::string_view text, size_t pos) {
  auto at = [&](size_t i) { return pos + i < text.size() ? lower(text[pos + i]) : '\0'; };
  const char a = at(1), b = at(2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  return 0;
}

bool is_newline(char c) { return c == '\r' || c == '\n'; }

// The end of the run of characters of class `cls` starting at pos.
size_t run_end(std::string_view text, size_t pos, CharClass cls) {
  size_t len = 0;
  while (pos < text.size() && classify_char(text, pos, &len) == cls) pos += len;
  return pos;
}

}  // namespace

size_t next_cl100k_pretoken_end(std::string_view text, size_t pos) {
  const size_t n = text.size();
  if (text[pos] == '\'') {  // 1
    if (const size_t len = contraction_length_any_case(text, pos)) return pos + len;
  }
  size_t len = 0;
  const CharClass cls = classify_char(text, pos, &len);
  if (cls == CharClass::letter) return run_end(text, pos, CharClass::letter);  // 2
  if (cls != CharClass::digit && !is_newline(text[pos]) && pos + len < n) {
    size_t next_len = 0;
    if (classify_char(text, pos + len, &next_len) == CharClass::letter)
      return run_end(text, pos + len, CharClass::letter);  // 2, with its leading character
  }
  if (cls == CharClass::digit) {  // 3
    size_t end = pos;
    for (int k = 0; k < 3 && end < n && classify_char(text, end, &len) == CharClass::digit; ++k)
      end += len;
    return end;
  }
  size_t start = pos;  // 4
  if (text[pos] == ' ' && pos + 1 < n) {
    size_t next_len = 0;
    if (classify_char(text, pos + 1, &next_len) == CharClass::other) start = pos + 1;
  }
  if (start != pos || cls == CharClass::other) {
    size_t end = run_end(text, start, CharClass::other);
    while (end < n && is_newline(text[end])) ++end;
    return end;
  }
  // Whitespace: the run [pos, end), its last character at `last`, its last newline.
  size_t end = pos, last = pos, after_newline = 0;
  while (end < n && classify_char(text, end, &len) == CharClass::space) {
    last = end;
    if (is_newline(text[end])) after_newline = end + 1;
    end += len;
  }
  if (after_newline != 0) return after_newline;  // 5
  if (end == n || last == pos) return end;       // 6 at the end of the text, or 7
  return last;                                   // 6
}

}  // namespace tessera::data
