// Completion: where a continuation ends (end-of-text, a stop string, the limit) and what a
// stream may send before it does.

#include <gtest/gtest.h>

#include "tessera/core/error.h"
#include "tessera/nn/completion.h"

namespace tessera::nn {
namespace {

const data::ByteTokenizer kBytes;

// Feeds the bytes of `text` one token each; returns what ready_text() handed out, joined.
std::string stream(Completion& c, const std::string& text) {
  std::string sent;
  for (unsigned char b : text) {
    c.add(b);
    sent += c.ready_text();
  }
  return sent;
}

TEST(Completion, EndsAtEndOfTextUnlessTold) {
  Completion c(kBytes, {});
  EXPECT_TRUE(c.add('h'));
  EXPECT_TRUE(c.add('i'));
  EXPECT_FALSE(c.add(kBytes.eot_id()));
  EXPECT_FALSE(c.add('x'));  // ignored once done
  EXPECT_EQ(c.text(), "hi");
  EXPECT_EQ(c.tokens(), (std::vector<int32_t>{'h', 'i'}));
  EXPECT_STREQ(c.finish_reason(), "stop");

  Completion on(kBytes, {.at_end_of_text = false, .stop = {}});
  on.add('h');
  EXPECT_TRUE(on.add(kBytes.eot_id()));
  on.finish();
  EXPECT_STREQ(on.finish_reason(), "length");
  EXPECT_EQ(on.text(), std::string("h") + std::string(data::kEndOfText));
}

TEST(Completion, StopStringCutsTheText) {
  Completion c(kBytes, {.stop = {"\n\n", "END"}});
  const std::string sent = stream(c, "one\ntwo\n\nthree");
  EXPECT_TRUE(c.done());
  EXPECT_EQ(c.text(), "one\ntwo");
  EXPECT_STREQ(c.finish_reason(), "stop");
  EXPECT_EQ(sent + c.ready_text(), "one\ntwo");  // the stream never sent past the cut
  Completion e(kBytes, {.stop = {"\n\n", "END"}});
  stream(e, "xxENDyy");
  EXPECT_EQ(e.text(), "xx");
}

// A tail that could still become a stop string is held back, and released when it does not.
TEST(Completion, StreamHoldsBackPossibleStops) {
  Completion c(kBytes, {.stop = {"STOP"}});
  c.add('a');
  EXPECT_EQ(c.ready_text(), "a");
  c.add('S');
  c.add('T');
  EXPECT_EQ(c.ready_text(), "");  // "ST" may become "STOP"
  c.add('x');
  EXPECT_EQ(c.ready_text(), "STx");
  c.finish();
  EXPECT_EQ(c.ready_text(), "");
  EXPECT_STREQ(c.finish_reason(), "length");
}

// An unfinished UTF-8 character is held until its last byte arrives.
TEST(Completion, StreamKeepsCharactersWhole) {
  Completion c(kBytes, {});
  const std::string snow = "\xE2\x98\x83";  // U+2603, three bytes
  c.add(static_cast<unsigned char>(snow[0]));
  EXPECT_EQ(c.ready_text(), "");
  c.add(static_cast<unsigned char>(snow[1]));
  EXPECT_EQ(c.ready_text(), "");
  c.add(static_cast<unsigned char>(snow[2]));
  EXPECT_EQ(c.ready_text(), snow);
}

TEST(Completion, BadInputIsRefused) {
  EXPECT_THROW(Completion(kBytes, {.stop = {"ok", ""}}), Error);
  Completion c(kBytes, {});
  EXPECT_THROW(c.add(400), Error);
}

}  // namespace
}  // namespace tessera::nn
