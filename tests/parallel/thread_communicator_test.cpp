// The thread communicator's own behaviour, beyond the semantics communicator_test.cpp checks
// against every communicator: the rank-order reduction over each dtype, tag matching, split,
// a failing rank, mismatched collectives and the timeout. Each test starts its own ranks.

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tessera/parallel/comm/run_ranks.h"
#include "tessera/parallel/comm/thread_communicator.h"
#include "tessera/tessera.h"

namespace tessera::parallel {
namespace {

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// What each rank threw, by rank.
struct Thrown {
  std::mutex mutex;
  std::vector<std::string> by_rank;
  explicit Thrown(int n) : by_rank(size_t(n)) {}
  void record(int rank, const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex);
    by_rank[size_t(rank)] = e.what();
  }
};

TEST(ThreadCommunicatorN1, SumsInRankOrderWithTheSameBitsOnEveryRank) {
  // 1e8 + 1 + 1 + ... rounds each 1 away in f32 when summed left to right; any other order
  // (the ones first) keeps them. Repeated so that the threads arrive in different orders.
  const int n = 8;
  float expected = 1e8f;
  for (int r = 1; r < n; ++r) expected = expected + 3.f;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> got(static_cast<size_t>(n));
    run_ranks(n, [&](std::shared_ptr<Communicator> world) {
      Tensor x = full({5}, world->rank() == 0 ? 1e8 : 3.0);
      world->all_reduce(x);
      got[size_t(world->rank())] = to_vector<float>(x)[4];
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(got[size_t(r)], expected) << "rank " << r;
  }
}

TEST(ThreadCommunicatorN1, ReducesEveryDtypeTheMpiCommunicatorReduces) {
  run_ranks(3, [](std::shared_ptr<Communicator> world) {
    const int r = world->rank();
    for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64}) {
      Tensor s = ops::cast(full({1}, double(r + 1)), dt);
      world->all_reduce(s, CommOp::sum);
      EXPECT_EQ(ops::cast(s, DType::f64).item<double>(), 6.0) << dtype_name(dt);
      Tensor m = ops::cast(full({1}, double(10 - r)), dt);
      world->all_reduce(m, CommOp::max);
      EXPECT_EQ(ops::cast(m, DType::f64).item<double>(), 10.0) << dtype_name(dt);
      if (is_floating(dt)) {
        Tensor a = ops::cast(full({1}, double(3 * r)), dt);
        world->all_reduce(a, CommOp::avg);
        EXPECT_EQ(ops::cast(a, DType::f64).item<double>(), 3.0) << dtype_name(dt);
      }
      // reduce_scatter: chunk k of the sum lands on rank k.
      Tensor in = ops::cast(full({6}, double(r)), dt), out = ops::cast(zeros({2}), dt);
      world->reduce_scatter(in, out, CommOp::sum);
      EXPECT_EQ(to_vector<double>(ops::cast(out, DType::f64))[1], 3.0) << dtype_name(dt);
    }
    // 16-bit floats travel but are not reduced, as with MPI.
    Tensor h = ops::cast(full({2}, double(r)), DType::bf16);
    EXPECT_THROW(world->all_reduce(h), Error);
    Tensor g = ops::cast(zeros({6}), DType::bf16);
    world->all_gather(h, g);
    EXPECT_EQ(to_vector<float>(ops::cast(g, DType::f32))[5], 2.f);
    world->broadcast(h, 2);
    EXPECT_EQ(to_vector<float>(ops::cast(h, DType::f32))[0], 2.f);
  });
}

TEST(ThreadCommunicatorN1, MaxPropagatesNan) {
  run_ranks(2, [](std::shared_ptr<Communicator> world) {
    Tensor x = full({1}, world->rank() == 1 ? std::nan("") : 1.0);
    world->all_reduce(x, CommOp::max);
    EXPECT_TRUE(std::isnan(x.item<float>()));
  });
}

TEST(ThreadCommunicatorN1, RecvMatchesSourceAndTagInIssueOrder) {
  run_ranks(2, [](std::shared_ptr<Communicator> world) {
    if (world->rank() == 0) {
      world->send(full({2}, 1.0), 1, 1);
      world->send(full({2}, 2.0), 1, 2);
      world->send(full({2}, 3.0), 1, 1);
      // Posted before rank 1 sends: the recv completes when the send comes.
      Tensor back = zeros({3});
      auto w = world->recv_async(back, 1, 9);
      w->wait();
      EXPECT_EQ(to_vector<float>(back)[2], 7.f);
    } else {
      Tensor a = zeros({2}), b = zeros({2}), c = zeros({2});
      world->recv(b, 0, 2);
      world->recv(a, 0, 1);
      world->recv(c, 0, 1);
      EXPECT_EQ(to_vector<float>(a)[0], 1.f);
      EXPECT_EQ(to_vector<float>(b)[0], 2.f);
      EXPECT_EQ(to_vector<float>(c)[0], 3.f);
      world->send(full({3}, 7.0), 0, 9);
      // A recv whose size differs from the send's is an error naming both.
      world->send(zeros({4}), 0, 5);
    }
    if (world->rank() == 0) {
      try {
        world->recv(zeros({3}), 1, 5);
        FAIL() << "a recv of 3 elements matched a send of 4";
      } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "the matching send carries f32[4]")) << e.what();
      }
    }
  });
}

TEST(ThreadCommunicatorN1, SplitOrdersByKeyAndSharesTheStep) {
  run_ranks(4, [](std::shared_ptr<Communicator> world) {
    const int r = world->rank();
    world->set_step(3);
    // Even and odd ranks, each group in reverse rank order.
    auto half = world->split(r % 2, -r, "half");
    EXPECT_EQ(half->size(), 2);
    EXPECT_EQ(half->rank(), r < 2 ? 1 : 0);
    EXPECT_EQ(half->name(), "half");
    Tensor t = from_vector<int64_t>({int64_t(r)}, {1});
    half->all_reduce(t);
    EXPECT_EQ(t.item<int64_t>(), r % 2 == 0 ? 2 : 4);
    Tensor gathered = from_vector<int64_t>({-1, -1}, {2});
    half->all_gather(from_vector<int64_t>({int64_t(r)}, {1}), gathered);
    EXPECT_EQ(to_vector<int64_t>(gathered)[0], r % 2 + 2);  // group rank 0 is the higher rank
    EXPECT_EQ(half->step(), 3);
    half->set_step(4);
    EXPECT_EQ(world->step(), 4);
    // A split of a split, then the parent again: each group keeps its own order.
    auto one = half->split(half->rank(), 0, "one");
    EXPECT_EQ(one->size(), 1);
    world->barrier();
  });
}

TEST(ThreadCommunicatorN1, ThrowingRankFailsThePeersThatWaitOnIt) {
  // Without the failure mark the peers would wait out the timeout (5 s) and abort the run.
  Thrown thrown(4);
  CommOptions options;
  options.timeout_seconds = 5;
  try {
    run_ranks(
        4,
        [&](std::shared_ptr<Communicator> world) {
          try {
            if (world->rank() == 2) throw Error("rank two gives up");
            Tensor x = ones({3});
            world->all_reduce(x);
          } catch (const std::exception& e) {
            thrown.record(world->rank(), e);
            throw;
          }
        },
        options);
    FAIL() << "run_ranks returned although rank 2 threw";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "rank 2 failed: rank two gives up")) << e.what();
  }
  for (int r : {0, 1, 3}) {
    EXPECT_TRUE(contains(thrown.by_rank[size_t(r)], "rank 2 failed: rank two gives up"))
        << "rank " << r << ": " << thrown.by_rank[size_t(r)];
    EXPECT_TRUE(contains(thrown.by_rank[size_t(r)], "all_reduce sum of f32[3]"))
        << thrown.by_rank[size_t(r)];
  }
}

TEST(ThreadCommunicatorN1, MismatchedCollectivesAreOneErrorOnEveryRank) {
  Thrown thrown(2);
  EXPECT_THROW(run_ranks(2,
                         [&](std::shared_ptr<Communicator> world) {
                           Tensor x = ones({3});
                           try {
                             if (world->rank() == 0)
                               world->all_reduce(x);
                             else
                               world->broadcast(x, 0);
                           } catch (const std::exception& e) {
                             thrown.record(world->rank(), e);
                             throw;
                           }
                         }),
               Error);
  for (int r = 0; r < 2; ++r) {
    const std::string& what = thrown.by_rank[size_t(r)];
    EXPECT_TRUE(contains(what, "collective mismatch on group world")) << what;
    EXPECT_TRUE(contains(what, "all_reduce sum of f32[3]")) << what;
    EXPECT_TRUE(contains(what, "broadcast from 0 of f32[3]")) << what;
  }
}

// A wait past the timeout throws CommError naming the call and breaks the rank's groups: the
// world and a group split from it refuse every later call, naming the first failure. (With the
// old behaviour, an abort, the process would end inside the first wait.)
TEST(ThreadCommunicatorN1, AWaitPastTheTimeoutThrowsAndBreaksTheGroups) {
  CommOptions options;
  options.timeout_seconds = 0.2;
  std::string timed_out, refused, refused_split;
  bool broken = false;
  run_ranks(
      2,
      [&](std::shared_ptr<Communicator> world) {
        world->set_step(17);
        auto pair = world->split(0, world->rank(), "dp");
        if (world->rank() != 0) return;  // rank 1 never joins the all-reduce, and does not fail
        try {
          world->all_reduce(ones({3}));
        } catch (const CommError& e) {
          timed_out = e.what();
        }
        broken = world->broken() && pair->broken();
        try {
          world->broadcast(ones({2}), 0);
        } catch (const CommError& e) {
          refused = e.what();
        }
        try {
          pair->barrier();
        } catch (const CommError& e) {
          refused_split = e.what();
        }
      },
      options);
  EXPECT_TRUE(contains(timed_out, "collective timed out after")) << timed_out;
  EXPECT_TRUE(contains(timed_out, "(timeout 0.2 s): rank 0 of group world (size 2), all_reduce "
                                  "sum of f32[3] on cpu, step 17"))
      << timed_out;
  EXPECT_TRUE(broken);
  EXPECT_TRUE(contains(refused, "broadcast of f32[2] on cpu, step 17: refused, the group is broken")) << refused;
  EXPECT_TRUE(contains(refused, timed_out)) << refused;
  EXPECT_TRUE(contains(refused_split, "group dp (size 2), barrier, step 17: refused")) << refused_split;
}

// A barrier's own timeout replaces the group's for that call (the wait after a save).
TEST(ThreadCommunicatorN1, ABarrierWaitsForItsOwnTimeout) {
  CommOptions options;
  options.timeout_seconds = 0.2;
  run_ranks(
      2,
      [](std::shared_ptr<Communicator> world) {
        if (world->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(600));
        world->barrier(30);  // rank 1 waits 0.6 s, three times the group's timeout
        EXPECT_FALSE(world->broken());
        world->all_reduce(ones({1}));  // the group still works
      },
      options);
}

}  // namespace
}  // namespace tessera::parallel
