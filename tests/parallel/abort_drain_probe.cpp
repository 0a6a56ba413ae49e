// mpiexec -n 2 abort_drain_probe [raw]: rank 0 writes 4,000 numbered lines (256 KiB, four
// times a pipe's buffer) to stderr, then a last line, and ends the job with
// parallel::abort_mpi_job(124); rank 1 waits for the abort. ctest (parallel.abort_drain)
// passes when the last line reaches mpiexec's output. With `raw` the probe calls MPI_Abort
// right after writing, as Tessera once did: mpiexec then drops what its proxy had not read
// (the collective-timeout report lost in a CI run), which the check of this mechanism shows.

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>

#include "tessera/parallel/comm/mpi_communicator.h"

int main(int argc, char** argv) {
  tessera::parallel::MpiSession session(&argc, &argv);
  const bool raw = argc > 1 && std::strcmp(argv[1], "raw") == 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    std::this_thread::sleep_for(std::chrono::seconds(30));  // the abort ends it
    return 1;
  }
  const std::string pad(48, '.');
  for (int i = 0; i < 4000; ++i) std::cerr << "abort_drain_probe: line " << i << ' ' << pad << '\n';
  std::cerr << "abort_drain_probe: the last line before the abort\n";
  if (raw) {
    std::cerr.flush();
    MPI_Abort(MPI_COMM_WORLD, 124);
  }
  tessera::parallel::abort_mpi_job(124);
}
