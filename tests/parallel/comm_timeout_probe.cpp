// mpiexec -n 2 comm_timeout_probe <spin|yield>: checks that the world waits in that mode
// (exit 3 if not), then rank 1 never joins rank 0's all-reduce, so rank 0's wait passes its
// 0.3 s timeout and throws CommError. Rank 0 prints what it caught and what a later call on a
// group split from the world says, then returns from main: MpiSession ends the job with
// MPI_Abort(124), since MPI cannot finalize around the abandoned collective. ctest
// (parallel.comm_timeout.spin / .yield) passes when both lines are printed; a library that
// aborted inside the wait, as it once did, prints neither.

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "tessera/parallel/comm/mpi_communicator.h"
#include "tessera/tessera.h"

int main(int argc, char** argv) {
  using namespace tessera;
  parallel::MpiSession session(&argc, &argv);
  const std::string want = argc > 1 ? argv[1] : "";
  parallel::CommOptions options;
  options.timeout_seconds = 0.3;
  options.wait = parallel::parse_comm_wait(want, "comm_timeout_probe");
  auto world = parallel::MpiCommunicator::world(options);
  if (world->options().wait != options.wait) return 3;
  auto half = world->split(world->rank(), 0, "tp");  // a group of one, of the same family
  world->set_step(5);
  if (world->rank() != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(30));  // never joins; the abort ends it
    return 1;
  }
  try {
    world->all_reduce(ones({3}));
    std::printf("comm_timeout_probe: the all-reduce completed, which it must not\n");
    return 1;
  } catch (const parallel::CommError& e) {
    std::printf("comm_timeout_probe: caught: %s\n", e.what());
  }
  try {
    half->all_reduce(ones({2}));
    std::printf("comm_timeout_probe: the split group still ran a collective\n");
    return 1;
  } catch (const parallel::CommError& e) {
    std::printf("comm_timeout_probe: then: %s\n", e.what());
  }
  std::fflush(stdout);
  return 0;  // ~MpiSession: MPI_Abort(124)
}
