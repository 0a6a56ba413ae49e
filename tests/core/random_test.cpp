// The Philox stream: known answers, the (seed, offset) contract of Generator, and independence
// from the thread count and from how a tensor is split into draws.

#include <gtest/gtest.h>

#include <cmath>
#include <thread>

#include "tessera/core/detail/philox.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

TEST(Philox, MatchesPublishedKnownAnswer) {
  // Random123 kat_vectors: philox4x32-10, counter 0, key 0.
  philox::Block b = philox::philox4x32(0, 0);
  EXPECT_EQ(b.v[0], 0x6627e8d5u);
  EXPECT_EQ(b.v[1], 0xe169c58du);
  EXPECT_EQ(b.v[2], 0xbc57ac4cu);
  EXPECT_EQ(b.v[3], 0x9b00dbd8u);
}

TEST(Philox, BitsWalkTheLanesOfConsecutiveBlocks) {
  for (uint64_t i = 0; i < 12; ++i)
    EXPECT_EQ(philox::bits(99, i), philox::philox4x32(i / 4, 99).v[i % 4]) << i;
  // Different keys and counters give unrelated words.
  EXPECT_NE(philox::bits(1, 0), philox::bits(2, 0));
  EXPECT_NE(philox::bits(1, 0), philox::bits(1, 4));
}

TEST(Philox, UnitFloatAndDropThresholdBounds) {
  EXPECT_EQ(philox::to_unit_float(0), 0.0f);
  EXPECT_EQ(philox::to_unit_float(0xffffffffu), 1.0f - std::ldexp(1.0f, -24));  // below 1
  EXPECT_EQ(philox::drop_threshold(0.0), 0u);  // p = 0 keeps every element
  EXPECT_EQ(philox::drop_threshold(0.5), 0x80000000u);
  EXPECT_EQ(philox::drop_threshold(std::nextafter(1.0, 0.0)), 0xffffffffu);
}

TEST(Generator, AdvanceReservesConsecutiveRanges) {
  Generator g(7, 100);
  EXPECT_EQ(g.advance(10), 100u);
  EXPECT_EQ(g.advance(5), 110u);
  EXPECT_EQ(g.offset(), 115u);
  g.set_state(8, 3);
  EXPECT_EQ(g.seed(), 8u);
  EXPECT_EQ(g.advance(1), 3u);
}

TEST(Generator, SavedStateReproducesLaterDraws) {
  Generator g(5);
  rand({17}, g);
  uint64_t seed = g.seed(), offset = g.offset();
  Tensor a = randn({4, 9}, g);
  g.set_state(seed, offset);
  Tensor b = randn({4, 9}, g);
  EXPECT_TRUE(equal(a, b));
}

TEST(Generator, DefaultGeneratorIsPerThread) {
  Generator& mine = default_generator();
  uint64_t before = mine.offset();
  uint64_t other_offset = 1;
  std::thread t([&] {
    // A fresh thread starts from (0, 0) whatever this thread has drawn.
    other_offset = default_generator().offset();
    rand({8}, default_generator());
  });
  t.join();
  EXPECT_EQ(other_offset, 0u);
  EXPECT_EQ(mine.offset(), before);
}

// Sizes spanning several of the kernels' parallel pieces (1 << 13 and 1 << 14 elements).
constexpr int64_t kBig = 100003;

TEST(RandomStreams, DoNotDependOnThreadCount) {
  ScopedNumThreads guard(num_threads());
  auto draw = [] {
    Generator g(31, 5);
    Tensor u = rand({kBig}, g);
    Tensor z = randn({kBig}, g, DType::bf16);
    Tensor d = ops::dropout(u, 0.3, 77, 12345);
    return std::vector<Tensor>{u, z, d};
  };
  set_num_threads(1);
  std::vector<Tensor> one = draw();
  set_num_threads(2);
  std::vector<Tensor> two = draw();
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(equal(one[i], two[i])) << "draw " << i;
}

TEST(RandomStreams, TwoHalvesEqualOneDraw) {
  // An odd split point: the normal draw pairs positions into blocks by parity, and the
  // second half must still pick up exactly where the first ended.
  const int64_t n = 2 * 1001;
  for (bool normal : {false, true}) {
    Generator whole_gen(123, 9), split_gen(123, 9);
    auto draw = [&](int64_t k, Generator& g) { return normal ? randn({k}, g) : rand({k}, g); };
    Tensor whole = draw(n, whole_gen);
    Tensor first = draw(1001, split_gen);
    Tensor second = draw(1001, split_gen);
    EXPECT_TRUE(equal(ops::cat({first, second}, 0), whole)) << (normal ? "randn" : "rand");
    EXPECT_EQ(whole_gen.offset(), split_gen.offset());
  }
}

TEST(RandomStreams, ShardedInitEqualsSlicedFullDraw) {
  // A rank that owns rows [3, 7) of a [10, 6] weight draws them with offset 3 * 6.
  Generator full_gen(42);
  Tensor full_w = randn({10, 6}, full_gen);
  Generator shard_gen(42, 3 * 6);
  Tensor shard = randn({4, 6}, shard_gen);
  EXPECT_TRUE(equal(shard, ops::contiguous(ops::narrow(full_w, 0, 3, 4))));
}

TEST(RandomStreams, DTypeOnlyChangesTheFinalRounding) {
  Generator a(8), b(8);
  Tensor f32 = randn({999}, a);
  Tensor f64 = randn({999}, b, DType::f64);
  EXPECT_TRUE(equal(f32, ops::cast(f64, DType::f32)));
  Generator c(8), d(8);
  EXPECT_TRUE(equal(rand({999}, c, DType::bf16), ops::cast(rand({999}, d), DType::bf16)));
}

TEST(RandomStreams, DropoutMaskOfHalvesEqualsWhole) {
  Generator g(1);
  Tensor x = randn({kBig}, g);
  Tensor whole = ops::dropout(x, 0.25, 5, 1000);
  const int64_t h = 50001;  // odd: halves start at different lanes of a block
  Tensor a = ops::dropout(ops::narrow(x, 0, 0, h), 0.25, 5, 1000);
  Tensor b = ops::dropout(ops::narrow(x, 0, h, kBig - h), 0.25, 5, 1000 + h);
  EXPECT_TRUE(equal(ops::cat({a, b}, 0), whole));
}

}  // namespace
}  // namespace tessera
