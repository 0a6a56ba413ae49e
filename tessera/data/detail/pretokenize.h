#pragma once
// Pre-tokenisation: splitting text into chunks before BPE, so merges never cross a chunk
// boundary. The split follows GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// written by hand over UTF-8. For ASCII text the chunks are exactly GPT-2's. Beyond ASCII,
// characters are classified by this small fixed table instead of the full Unicode database:
//   whitespace: U+0009-U+000D, U+0020 and Unicode's White_Space set (U+0085, U+00A0, U+1680,
//     U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000);
//   digits: 0-9, U+00B2, U+00B3, U+00B9, U+00BC-U+00BE, U+0660-U+0669, U+06F0-U+06F9,
//     U+0966-U+096F, U+FF10-U+FF19;
//   other (punctuation, symbols, controls): the rest of ASCII, U+0080-U+00BF except the
//     digits above and U+00AA, U+00B5, U+00BA, plus U+00D7, U+00F7, U+2010-U+2027,
//     U+2030-U+205E, U+20A0-U+20CF, U+2190-U+23FF, U+2500-U+27BF, U+3001-U+303F, U+FE30-U+FE4F,
//     U+FF01-U+FF0F, U+FF1A-U+FF20, U+FF3B-U+FF40, U+FF5B-U+FF65, U+1F000-U+1FAFF;
//   letters: every other code point, combining marks included (GPT-2 splits marks off; keeping
//     them with their letter keeps words whole), and every byte that is not part of valid UTF-8
//     (so Latin-1 text such as "caf\xe9" stays one word). Invalid bytes still round-trip: the
//     chunks always concatenate back to the input.

#include <cstddef>
#include <string_view>
#include <vector>

#include "tessera/data/bpe_core.h"

namespace tessera::data {

enum class CharClass { letter, digit, space, other };

// The class of the character starting at text[pos] (pos < text.size()) and its length in bytes
// (1 for an invalid UTF-8 byte).
CharClass classify_char(std::string_view text, size_t pos, size_t* length);

// Whether text is well-formed UTF-8 (no overlong forms, surrogates or code points > U+10FFFF).
bool is_valid_utf8(std::string_view text);

// SplitPattern::cl100k is the pattern of OpenAI's cl100k_base that Llama 3 adopted
// (pretokenize_cl100k.cpp), over the same character classes:
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+

// The end of the chunk that starts at pos (pos < text.size()).
size_t next_pretoken_end(std::string_view text, size_t pos,
                         SplitPattern pattern = SplitPattern::gpt2);
size_t next_cl100k_pretoken_end(std::string_view text, size_t pos);

// All chunks of text, in order; they concatenate to text.
std::vector<std::string_view> pretokenize(std::string_view text,
                                          SplitPattern pattern = SplitPattern::gpt2);

}  // namespace tessera::data
