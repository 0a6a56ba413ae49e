#include <gtest/gtest.h>

#include "tessera/core/error.h"
#include "tessera/data/tokenizer.h"

namespace tessera::data {
namespace {

TEST(ByteTokenizer, RoundTripsArbitraryBytes) {
  ByteTokenizer tok;
  std::string text = "héllo\n\t\x01\xff <|endoftext|> end";
  std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(ids.size(), text.size());
  EXPECT_EQ(tok.decode(ids), text);
}

TEST(ByteTokenizer, SpecialTokenOnlyWhenAllowed) {
  ByteTokenizer tok;
  std::vector<int32_t> ids = tok.encode("a<|endoftext|>b", /*allow_special=*/true);
  EXPECT_EQ(ids, (std::vector<int32_t>{'a', ByteTokenizer::kEot, 'b'}));
  EXPECT_EQ(tok.decode(ids), "a<|endoftext|>b");
  EXPECT_EQ(tok.special_id("<|endoftext|>"), ByteTokenizer::kEot);
  EXPECT_FALSE(tok.special_id("<|pad|>").has_value());
}

TEST(ByteTokenizer, DecodeRejectsOutOfRangeIds) {
  ByteTokenizer tok;
  std::vector<int32_t> ids = {65, 300};
  try {
    tok.decode(ids);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("position 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::data
