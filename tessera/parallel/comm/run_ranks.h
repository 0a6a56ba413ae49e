#pragma once
// run_ranks: a distributed program as threads of one process, one per rank, over a
// ThreadCommunicator world (comm/thread_communicator.h says what it does and does not cover).
//
//   run_ranks(4, [&](std::shared_ptr<Communicator> world) {
//     DeviceMesh mesh(world, {2, 2, 1});
//     ...  // the code each rank runs under mpiexec -n 4
//   });
//
// A research layout can be stepped through in one debugger this way, with every rank's stack
// at hand, and without MPI. Each rank should keep its CPU backend to one thread
// (OMP_NUM_THREADS=1, or set_num_threads(1) at the top of body): the ranks already share the
// machine's cores.

#include <functional>
#include <memory>

#include "tessera/parallel/comm/communicator.h"

namespace tessera::parallel {

// Runs body(world) on n threads, rank k's world of size n given to thread k, and joins them.
// A rank whose body throws marks the world failed (ThreadCommunicator::fail), so the other
// ranks' waits on it throw instead of hanging; once every thread has ended, the first
// failure is thrown here as tessera::Error, "rank k failed: <what it threw>".
void run_ranks(int n, const std::function<void(std::shared_ptr<Communicator> world)>& body,
               CommOptions options = {});

}  // namespace tessera::parallel
