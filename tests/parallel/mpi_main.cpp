// gtest main for the distributed tests under mpiexec: every rank runs every test; rank 0
// prints progress and every rank prints its own failures, prefixed with its rank.

#include <gtest/gtest.h>

#include <cstdio>

#include "parallel/rank_test.h"
#include "tessera/parallel/comm/mpi_communicator.h"

namespace tessera::parallel::testing {

std::shared_ptr<Communicator> test_world() {
  return MpiCommunicator::world();
}

// mpiexec started the ranks: each process runs the body once.
void run_rank_test(const char*, void (*body)()) {
  body();
}

}  // namespace tessera::parallel::testing

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?",
                   r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  tessera::parallel::MpiSession session(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = tessera::parallel::MpiCommunicator::world()->rank();
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int failed = RUN_ALL_TESTS();
  // Every rank must agree: a failure anywhere fails the run.
  int any = failed;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return any;
}
