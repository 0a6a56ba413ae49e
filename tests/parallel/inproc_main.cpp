// gtest main for the distributed tests run in one process: a RANK_TEST's body runs on one
// thread per rank over a ThreadCommunicator world (rank_test.h). A fatal assertion on one rank
// fails the world, so its peers' waits throw instead of hanging.

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "parallel/rank_test.h"
#include "tessera/core/error.h"
#include "tessera/parallel/comm/run_ranks.h"
#include "tessera/parallel/comm/thread_communicator.h"

namespace tessera::parallel::testing {

namespace {

thread_local std::shared_ptr<ThreadCommunicator> current_world;

// A fatal assertion ends its rank's body; its peers would wait on it until the timeout.
class FailWorldOnFatalAssertion : public ::testing::EmptyTestEventListener {
 public:
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.fatally_failed() && current_world)
      current_world->fail(str_cat("a fatal assertion failed at ",
                                  r.file_name() ? r.file_name() : "?", ":", r.line_number()));
  }
};

// k in a suite named ...N<k>.
int ranks_of_suite(const char* suite) {
  const char* n = std::strrchr(suite, 'N');
  TESSERA_CHECK(n != nullptr && n[1] != '\0', "test suite ", suite,
                " does not name its ranks (SuiteN<k>)");
  char* end = nullptr;
  const long k = std::strtol(n + 1, &end, 10);
  TESSERA_CHECK(*end == '\0' && k >= 1, "test suite ", suite, " does not end in N<k>");
  return int(k);
}

}  // namespace

std::shared_ptr<Communicator> test_world() {
  TESSERA_CHECK(current_world != nullptr,
                "test_world: this thread runs no rank (only a RANK_TEST body has a world)");
  return current_world;
}

void run_rank_test(const char* suite, void (*body)()) {
  const int n = ranks_of_suite(suite);
  auto on_rank = [&](std::shared_ptr<Communicator> world) {
    current_world = std::static_pointer_cast<ThreadCommunicator>(world);
    SCOPED_TRACE(str_cat("rank ", world->rank(), " of ", n));
    try {
      body();
    } catch (...) {
      current_world.reset();
      throw;
    }
    current_world.reset();
  };
  try {
    if (n == 1) {
      // On the test's own thread: a one-rank test needs no other, and death tests stay simple.
      auto world = ThreadCommunicator::create_world(1)[0];
      try {
        on_rank(world);
      } catch (const std::exception& e) {
        world->fail(e.what());
        throw Error(world->failure());
      }
    } else {
      run_ranks(n, on_rank);
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << e.what();
  }
}

}  // namespace tessera::parallel::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::UnitTest::GetInstance()->listeners().Append(
      new tessera::parallel::testing::FailWorldOnFatalAssertion);
  return RUN_ALL_TESTS();
}
