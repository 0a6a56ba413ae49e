// parallel::first_rank_error and run_agreeing: every rank gets the same verdict from the ranks'
// own ones, the lowest failing rank and its message, whichever ranks fail and whatever their
// messages hold (a long one, bytes past ASCII, a newline); no failure is no error anywhere.
// Run over threads (test_parallel_inproc) and over MPI (test_parallel).

#include <memory>
#include <string>

#include "parallel/rank_test.h"
#include "tessera/core/error.h"
#include "tessera/parallel/comm/first_rank_error.h"

namespace tessera::parallel {
namespace {

using testing::test_world;

std::string message_of(int rank) {
  return "rank " + std::to_string(rank) + ": shard_0000" + std::to_string(rank) +
         ".safetensors: checksum \xc3\xa9 mismatch\n" + std::string(3000 + rank, 'x');
}

RANK_TEST(FirstRankErrorN4, EveryRankGetsTheLowestFailingRanksMessage) {
  const std::shared_ptr<Communicator> held = test_world();  // MPI's world() is a new object
  Communicator& world = *held;
  const int rank = world.rank();
  // Which ranks fail, as a bit mask, and the rank every rank must name (-1: none).
  for (const auto& [failing, lowest] :
       {std::pair{0b0000, -1}, std::pair{0b1010, 1}, std::pair{0b1000, 3}, std::pair{0b1111, 0}}) {
    const bool fails = (failing >> rank) & 1;
    const RankError e = first_rank_error(world, fails ? message_of(rank) : "");
    EXPECT_EQ(e.rank, lowest) << "failing " << failing;
    EXPECT_EQ(bool(e), lowest >= 0);
    EXPECT_EQ(e.message, lowest >= 0 ? message_of(lowest) : "") << "failing " << failing;
  }
}

RANK_TEST(FirstRankErrorN4, RunAgreeingThrowsTheSameErrorOnEveryRank) {
  const std::shared_ptr<Communicator> held = test_world();  // MPI's world() is a new object
  Communicator& world = *held;
  const int rank = world.rank();
  std::string error;
  bool ran = false;
  try {
    run_agreeing(world, [&] {
      ran = true;
      if (rank == 2) throw Error("shard_00002.safetensors: checksum mismatch");
      if (rank == 3) throw std::runtime_error("not a tessera error");
    });
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_TRUE(ran);
  EXPECT_EQ(error, "shard_00002.safetensors: checksum mismatch (on rank 2)");
  EXPECT_NO_THROW(run_agreeing(world, [] {}));
}

}  // namespace
}  // namespace tessera::parallel
