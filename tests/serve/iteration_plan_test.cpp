// The iteration plan a tensor-parallel leader sends its followers: encode and decode are
// inverse, the idle and stop plans survive the trip, and a truncated or padded message is
// refused naming the offset (tests/parallel/tp_serve_test.cpp runs the plans over a group).

#include <gtest/gtest.h>

#include "tessera/core/error.h"
#include "tessera/serve/iteration_plan.h"

namespace tessera::serve {
namespace {

IterationPlan sample_plan() {
  IterationPlan p;
  p.tokens = {5, 7, 11, 13, 2};
  p.segments = {{0, 0, 3}, {1, 17, 1}, {2, 4, 1}};
  p.tables = {{3, 9}, {0, 1, 2, 8, 4}, {6, 7}};
  return p;
}

void expect_same(const IterationPlan& got, const IterationPlan& want) {
  EXPECT_EQ(got.stop, want.stop);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.tables, want.tables);
  ASSERT_EQ(got.segments.size(), want.segments.size());
  for (size_t i = 0; i < got.segments.size(); ++i) {
    EXPECT_EQ(got.segments[i].row, want.segments[i].row) << "segment " << i;
    EXPECT_EQ(got.segments[i].start, want.segments[i].start) << "segment " << i;
    EXPECT_EQ(got.segments[i].length, want.segments[i].length) << "segment " << i;
  }
}

TEST(IterationPlan, DecodesWhatWasEncoded) {
  const IterationPlan plan = sample_plan();
  const std::vector<int32_t> words = encode_plan(plan);
  EXPECT_EQ(words.size(), 4u + 5 + 3 * 3 + (1 + 2) + (1 + 5) + (1 + 2));
  expect_same(decode_plan(words), plan);

  IterationPlan idle, stop;
  stop.stop = true;
  EXPECT_TRUE(decode_plan(encode_plan(idle)).idle());
  EXPECT_FALSE(decode_plan(encode_plan(idle)).stop);
  EXPECT_TRUE(decode_plan(encode_plan(stop)).stop);
}

TEST(IterationPlan, RefusesAMessageThatDoesNotFit) {
  const std::vector<int32_t> words = encode_plan(sample_plan());
  auto refused = [](std::vector<int32_t> w, const std::string& says) {
    try {
      decode_plan(w);
      ADD_FAILURE() << "accepted; expected: " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused({0, 1}, "the header needs 4 words at offset 0 but the message has 2");
  refused(std::vector<int32_t>(words.begin(), words.end() - 1),
          "a block table needs 2 words at offset 28 but the message has 29");
  std::vector<int32_t> padded = words;
  padded.push_back(0);
  refused(padded, "1 words left over after offset 30");
  std::vector<int32_t> flag = words;
  flag[0] = 7;
  refused(flag, "stop flag 7 at offset 0 is neither 0 nor 1");
  std::vector<int32_t> negative = words;
  negative[1] = -3;
  refused(negative, "the tokens needs -3 words");
}

}  // namespace
}  // namespace tessera::serve
