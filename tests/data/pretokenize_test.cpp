#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tessera/data/detail/pretokenize.h"

namespace tessera::data {
namespace {

std::vector<std::string> chunks(std::string_view text,
                                SplitPattern pattern = SplitPattern::gpt2) {
  std::vector<std::string> out;
  for (std::string_view c : pretokenize(text, pattern)) out.emplace_back(c);
  return out;
}

using Chunks = std::vector<std::string>;

// Expected splits are what GPT-2's pattern gives under Python's `regex` module.
TEST(Pretokenize, AsciiSplitsAsGpt2) {
  EXPECT_EQ(chunks("Hello world!  It's 2024...\n\n  ok"),
            (Chunks{"Hello", " world", "!", " ", " It", "'s", " 2024", "...", "\n\n ", " ok"}));
  EXPECT_EQ(chunks("I'm they're we've you'll he'd 'S ''s don't"),
            (Chunks{"I", "'m", " they", "'re", " we", "'ve", " you", "'ll", " he", "'d", " '", "S",
                    " ''", "s", " don", "'t"}));
  EXPECT_EQ(chunks("a  b\t\tc \n"), (Chunks{"a", " ", " b", "\t", "\t", "c", " \n"}));
  EXPECT_EQ(chunks("   "), (Chunks{"   "}));
  EXPECT_EQ(chunks("x\ny"), (Chunks{"x", "\n", "y"}));
  EXPECT_EQ(chunks("$100.50 + 3x=y_z"),
            (Chunks{"$", "100", ".", "50", " +", " 3", "x", "=", "y", "_", "z"}));
  EXPECT_EQ(chunks("tab\t\tend\t"), (Chunks{"tab", "\t", "\t", "end", "\t"}));
  EXPECT_TRUE(chunks("").empty());
}

TEST(Pretokenize, NonAsciiFollowsTheDocumentedTable) {
  // These characters are classified as Unicode does, so the split matches GPT-2's here too.
  EXPECT_EQ(chunks("naïve café — “quoted” 中文 ½ ٣٤ 😀!"),
            (Chunks{"naïve", " café", " —", " “", "quoted", "”", " 中文", " ½", " ٣٤", " 😀!"}));
  EXPECT_EQ(chunks("\u00a0nbsp x\u3000y"), (Chunks{"\u00a0", "nbsp", " x", "\u3000", "y"}));
}

TEST(Pretokenize, InvalidUtf8BytesAreLetters) {
  EXPECT_EQ(chunks("caf\xe9 ok\xff\xfe!"), (Chunks{"caf\xe9", " ok\xff\xfe", "!"}));
  // A truncated sequence at the end of the text.
  EXPECT_EQ(chunks("x \xe2\x82"), (Chunks{"x", " \xe2\x82"}));
  size_t len = 0;
  EXPECT_EQ(classify_char("\xc0\xaf", 0, &len), CharClass::letter);  // overlong '/'
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(classify_char("\xe2\x80\x94", 0, &len), CharClass::other);  // em dash
  EXPECT_EQ(len, 3u);
  EXPECT_EQ(classify_char("\xf0\x9f\x98\x80", 0, &len), CharClass::other);  // emoji
  EXPECT_EQ(len, 4u);
  EXPECT_EQ(classify_char("\xc2\xb2", 0, &len), CharClass::digit);  // superscript two
  EXPECT_EQ(classify_char("\xc2\xa0", 0, &len), CharClass::space);  // no-break space
}

TEST(Pretokenize, ChunksAlwaysConcatenateToTheInput) {
  std::mt19937 rng(5);
  for (int t = 0; t < 500; ++t) {
    std::string text(rng() % 64, '\0');
    for (char& c : text) c = char(rng() % 256);
    std::string joined;
    for (std::string_view c : pretokenize(text)) {
      EXPECT_FALSE(c.empty());
      joined += c;
    }
    EXPECT_EQ(joined, text);
  }
}

TEST(Pretokenize, ValidatesUtf8) {
  EXPECT_TRUE(is_valid_utf8("plain"));
  EXPECT_TRUE(is_valid_utf8("naïve 中文 😀"));
  EXPECT_FALSE(is_valid_utf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(is_valid_utf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(is_valid_utf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(is_valid_utf8("ab\xe2\x82"));        // truncated
  EXPECT_FALSE(is_valid_utf8("\x80"));              // lone continuation
}

// Expected splits are what the cl100k / Llama 3 pattern gives under Python's `regex` module:
// one case per alternative and the edges between them.
TEST(Pretokenize, SplitsAsCl100k) {
  auto cl100k = [](std::string_view text) { return chunks(text, SplitPattern::cl100k); };
  EXPECT_EQ(cl100k("I'LL do"), (Chunks{"I", "'LL", " do"}));       // contractions, any case
  EXPECT_EQ(cl100k(" 'til"), (Chunks{" '", "til"}));               // not a contraction
  EXPECT_EQ(cl100k("(hello)"), (Chunks{"(hello", ")"}));            // a letter run's lead
  EXPECT_EQ(cl100k("\tword"), (Chunks{"\tword"}));
  EXPECT_EQ(cl100k("a \u3000b"), (Chunks{"a", " ", "\u3000b"}));  // U+3000: whitespace
  EXPECT_EQ(cl100k("12345"), (Chunks{"123", "45"}));                // digits in threes
  EXPECT_EQ(cl100k("1a"), (Chunks{"1", "a"}));
  EXPECT_EQ(cl100k("!!\n\nx"), (Chunks{"!!\n\n", "x"}));           // punctuation + newlines
  EXPECT_EQ(cl100k("a\n\n\nb"), (Chunks{"a", "\n\n\n", "b"}));     // up to the last newline
  EXPECT_EQ(cl100k("x  \n  foo"), (Chunks{"x", "  \n", " ", " foo"}));
  EXPECT_EQ(cl100k("x   "), (Chunks{"x", "   "}));                  // at the end of the text
  EXPECT_EQ(cl100k("a  b"), (Chunks{"a", " ", " b"}));
}

}  // namespace
}  // namespace tessera::data
