#pragma once
// RANK_TEST(SuiteN<k>, Name): a distributed test, its body run by every rank of a world of k.
//
// Two binaries run these bodies. test_parallel_inproc (inproc_main.cpp) runs the k ranks as
// threads of one process over a ThreadCommunicator world; test_parallel (mpi_main.cpp) is
// started by mpiexec -n k and each process runs the body once, over MPI_COMM_WORLD. Inside a
// body, test_world() is the rank's world; a failure message names the rank (a gtest trace in
// the in-process binary, a "[rank k]" prefix under MPI).

#include <gtest/gtest.h>

#include <memory>

#include "tessera/parallel/comm/communicator.h"

namespace tessera::parallel::testing {

// The world of the rank this thread runs.
std::shared_ptr<Communicator> test_world();

// Runs body on every rank of the world the suite's name asks for (its trailing N<k>).
void run_rank_test(const char* suite, void (*body)());

}  // namespace tessera::parallel::testing

#define RANK_TEST(suite, name)                                                      \
  static void suite##_##name##_on_rank();                                           \
  TEST(suite, name) {                                                               \
    ::tessera::parallel::testing::run_rank_test(#suite, &suite##_##name##_on_rank); \
  }                                                                                 \
  static void suite##_##name##_on_rank()
