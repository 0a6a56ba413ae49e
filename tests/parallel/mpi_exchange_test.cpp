// The MPI communicator's two ways of moving float sums and gathers: point-to-point exchanges
// (groups up to CommOptions::mpi_exchange_max_ranks) and MPI's collectives (larger groups,
// forced here with mpi_exchange_max_ranks = 1). Both must give, bit for bit, the sum of the
// ranks' values added left to right in rank order, at every size: below and above the 64 KiB
// switch to reduce-scatter + all-gather, with and without padding. Calls in flight at once, in
// different phases on different ranks, must not take each other's messages.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "parallel/rank_test.h"
#include "tessera/parallel/comm/detail/mpi_exchange.h"
#include "tessera/parallel/comm/mpi_communicator.h"
#include "tessera/tessera.h"

namespace tessera::parallel {
namespace {

// A value with a full mantissa that differs per rank and element, so that any other order of
// the adds changes some bits: (r, i) hashed to [-1, 1).
double value(int rank, int64_t i) {
  uint64_t h = uint64_t(i) * 0x9E3779B97F4A7C15ull + uint64_t(rank + 1) * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 31;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 29;
  return double(h >> 11) / double(uint64_t(1) << 52) - 1.0;
}

template <class T>
Tensor rank_values(int rank, int64_t n, int64_t first = 0) {
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = T(value(rank, first + i));
  return from_vector<T>(v, {n});
}

// (v(0, i) + v(1, i) + ... + v(n-1, i)) * scale in T, left to right: the order the communicator
// promises.
template <class T>
T ordered_sum(int n, int64_t i, double scale) {
  T acc = T(value(0, i));
  for (int r = 1; r < n; ++r) acc += T(value(r, i));
  return scale == 1.0 ? acc : T(acc * T(scale));
}

std::shared_ptr<MpiCommunicator> world_with(int exchange_max_ranks) {
  CommOptions options;
  options.mpi_exchange_max_ranks = exchange_max_ranks;
  return MpiCommunicator::world(options);
}

template <class T>
void expect_all_reduce(Communicator& c, int64_t len, CommOp op) {
  const int n = c.size();
  Tensor x = rank_values<T>(c.rank(), len);
  c.all_reduce(x, op);
  const std::vector<T> got = to_vector<T>(x);
  const double scale = op == CommOp::avg ? 1.0 / n : 1.0;
  int64_t wrong = 0;
  for (int64_t i = 0; i < len; ++i) wrong += got[size_t(i)] != ordered_sum<T>(n, i, scale);
  EXPECT_EQ(wrong, 0) << "all_reduce " << comm_op_name(op) << " of " << len << " "
                      << (sizeof(T) == 4 ? "f32" : "f64") << " on a group of " << n;
}

void sums_and_gathers(Communicator& c) {
  const int r = c.rank(), n = c.size();
  // 7: odd; 16384 f32: exactly 64 KiB, the last all-gather-and-sum size; 16385: just over,
  // and padded unless n divides it; 100000: the reduce-scatter path, in place for n = 2, 4.
  for (int64_t len : {int64_t(7), int64_t(16384), int64_t(16385), int64_t(100000)}) {
    expect_all_reduce<float>(c, len, CommOp::sum);
    expect_all_reduce<float>(c, len, CommOp::avg);
    expect_all_reduce<double>(c, len, CommOp::sum);
  }
  // reduce_scatter: rank r receives chunk r of the ordered sum.
  for (int64_t chunk : {int64_t(5), int64_t(40000)}) {
    Tensor in = rank_values<float>(r, chunk * n), out = empty({chunk});
    c.reduce_scatter(in, out);
    const std::vector<float> got = to_vector<float>(out);
    int64_t wrong = 0;
    for (int64_t i = 0; i < chunk; ++i)
      wrong += got[size_t(i)] != ordered_sum<float>(n, r * chunk + i, 1.0);
    EXPECT_EQ(wrong, 0) << "reduce_scatter of chunks of " << chunk;
  }
  // all_gather, from a separate tensor and from the rank's own slot of the output.
  for (int64_t len : {int64_t(3), int64_t(50000)}) {
    Tensor out = empty({len * n});
    c.all_gather(rank_values<float>(r, len), out);
    Tensor in_place = zeros({len * n});
    ops::copy_(ops::narrow(in_place, 0, r * len, len), rank_values<float>(r, len));
    c.all_gather(ops::narrow(in_place, 0, r * len, len), in_place);
    for (const Tensor& t : {out, in_place}) {
      const std::vector<float> got = to_vector<float>(t);
      int64_t wrong = 0;
      for (int k = 0; k < n; ++k)
        for (int64_t i = 0; i < len; ++i) wrong += got[size_t(k * len + i)] != float(value(k, i));
      EXPECT_EQ(wrong, 0) << "all_gather of " << len;
    }
  }
}

RANK_TEST(MpiExchangeN2, SumsInRankOrderOnBothPaths) {
  sums_and_gathers(*world_with(16));
  sums_and_gathers(*world_with(1));
}
RANK_TEST(MpiExchangeN4, SumsInRankOrderOnBothPaths) {
  sums_and_gathers(*world_with(16));
  sums_and_gathers(*world_with(1));
}

// Rank 0 issues a large all-reduce (two exchanges: its reduce-scatter, then its all-gather) and
// a small one before waiting on either; the other ranks issue and wait on each in turn, so
// their large all-reduce's all-gather messages reach rank 0 after rank 0 posted the small
// all-reduce's receives. With one tag for every call, those receives would take a chunk of
// the large all-reduce. (Works are waited in issue order: a later phase starts only from its
// own Work's test(), as grad_reducer.h relies on.)
RANK_TEST(MpiExchangeN4, CallsInFlightKeepTheirOwnMessages) {
  auto c = world_with(16);
  const int n = c->size();
  Tensor big = rank_values<float>(c->rank(), 100000), small = rank_values<float>(c->rank(), 7);
  if (c->rank() == 0) {
    auto wb = c->all_reduce_async(big);
    auto ws = c->all_reduce_async(small);
    wb->wait();
    ws->wait();
  } else {
    c->all_reduce_async(big)->wait();
    c->all_reduce_async(small)->wait();
  }
  const std::vector<float> got_small = to_vector<float>(small), got_big = to_vector<float>(big);
  for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(got_small[size_t(i)], ordered_sum<float>(n, i, 1.0));
  int64_t wrong = 0;
  for (int64_t i = 0; i < 100000; ++i) wrong += got_big[size_t(i)] != ordered_sum<float>(n, i, 1.0);
  EXPECT_EQ(wrong, 0);
}

RANK_TEST(MpiExchangeN2, TheCollectivesTagsAreRefusedToSendAndRecv) {
  auto c = world_with(16);
  const int peer = 1 - c->rank();
  for (int tag : {kFirstExchangeTag, kFirstExchangeTag + 5, -1}) {
    try {
      c->send(zeros({2}), peer, tag);
      ADD_FAILURE() << "send accepted tag " << tag;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("tag " + std::to_string(tag) + " is outside [0, 16384)"),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(c->recv(zeros({2}), peer, tag), Error);
  }
  // The last user tag works, and a user message between two collectives is its own.
  Tensor x = rank_values<float>(c->rank(), 9), mine = rank_values<float>(c->rank(), 4),
         theirs = empty({4});
  auto w = c->all_reduce_async(x);
  auto s = c->send_async(mine, peer, kFirstExchangeTag - 1);
  auto rv = c->recv_async(theirs, peer, kFirstExchangeTag - 1);
  rv->wait();
  s->wait();
  w->wait();
  EXPECT_EQ(to_vector<float>(theirs), to_vector<float>(rank_values<float>(peer, 4)));
  EXPECT_EQ(to_vector<float>(x)[8], ordered_sum<float>(2, 8, 1.0));
}

RANK_TEST(MpiExchangeN1, AGroupSizeBelowOneIsRefused) {
  try {
    world_with(0);
    ADD_FAILURE() << "accepted mpi_exchange_max_ranks 0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mpi_exchange_max_ranks must be at least 1, got 0"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tessera::parallel
