// How the MPI world waits (CommOptions::wait): resolved once, the same on every rank, to yield
// when the node runs more ranks than the cores a rank may use (ctest's -n 4 and -n 8 on two
// cores), else spin; TESSERA_COMM_WAIT forces it. Unknown modes are refused by name.

#include <gtest/gtest.h>
#include <sched.h>

#include <cstdlib>
#include <string>

#include "parallel/rank_test.h"
#include "tessera/parallel/comm/mpi_communicator.h"
#include "tessera/tessera.h"

namespace tessera::parallel {
namespace {

int cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  return CPU_COUNT(&set);
}

// Every rank of these tests runs on one node.
void expect_resolved_mode() {
  auto world = MpiCommunicator::world();
  const char* env = std::getenv("TESSERA_COMM_WAIT");
  const std::string forced = env != nullptr ? env : "";
  const CommWait want = forced == "spin"          ? CommWait::spin
                        : forced == "yield"       ? CommWait::yield
                        : world->size() > cores() ? CommWait::yield
                                                  : CommWait::spin;
  EXPECT_EQ(comm_wait_name(world->options().wait), std::string(comm_wait_name(want)))
      << world->size() << " ranks on " << cores() << " cores, TESSERA_COMM_WAIT='" << forced << "'";
  // The split groups inherit it.
  EXPECT_EQ(world->split(0, world->rank(), "child")->options().wait, world->options().wait);
  // An explicit mode is kept as asked.
  CommOptions yield;
  yield.wait = CommWait::yield;
  EXPECT_EQ(MpiCommunicator::world(yield)->options().wait, CommWait::yield);
}

RANK_TEST(MpiWaitN2, TheWorldResolvesItsWaitMode) {
  expect_resolved_mode();
}
RANK_TEST(MpiWaitN4, TheWorldResolvesItsWaitMode) {
  expect_resolved_mode();
}

RANK_TEST(MpiWaitN1, UnknownModesAreRefused) {
  EXPECT_EQ(parse_comm_wait("spin", "x"), CommWait::spin);
  EXPECT_EQ(parse_comm_wait("yield", "x"), CommWait::yield);
  EXPECT_EQ(parse_comm_wait("auto", "x"), CommWait::automatic);
  try {
    parse_comm_wait("fast", "TESSERA_COMM_WAIT");
    ADD_FAILURE() << "accepted 'fast'";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "TESSERA_COMM_WAIT: 'fast' is not a wait mode; expected auto, spin or yield");
  }
}

}  // namespace
}  // namespace tessera::parallel
