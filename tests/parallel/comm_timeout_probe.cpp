// mpiexec -n 2 comm_timeout_probe <spin|yield>: checks that the world waits in that mode
// (exit 3 if not), then rank 1 never joins rank 0's all-reduce, so rank 0's wait passes its
// 0.3 s timeout, prints the one line that names the call and aborts the job. ctest
// (parallel.comm_timeout.spin / .yield) passes when that line is printed.

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
  world->set_step(5);
  if (world->rank() == 0)
    world->all_reduce(ones({3}));
  else
    std::this_thread::sleep_for(std::chrono::seconds(30));  // never joins; the abort ends it
  std::printf("comm_timeout_probe: the all-reduce completed, which it must not\n");
  return 1;
}
