// abort_mpi_job: end the whole job from one rank without losing the rank's last words.
//
// MPI_Abort tears every process down at once, and mpiexec forwards only what a rank's proxy
// has already read from the rank's output pipes: a line written just before MPI_Abort can be
// dropped (a CI run lost the one-line collective-timeout report this way, while the step lines
// before it arrived). So the rank first waits, bounded, until the reader has drained its
// stdout and stderr pipes; the proxy reads a pipe before it handles the abort that follows.
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <linux/sockios.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include "tessera/parallel/comm/mpi_communicator.h"

namespace tessera::parallel {

namespace {

// Bytes written to `fd` that its reader has not consumed yet, or -1 where that cannot be told
// (a file or a terminal: nothing waits to be forwarded there).
int unread_output_bytes(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return -1;
  int n = 0;
  if (S_ISFIFO(st.st_mode)) return ioctl(fd, FIONREAD, &n) == 0 ? n : -1;
  if (S_ISSOCK(st.st_mode)) return ioctl(fd, SIOCOUTQ, &n) == 0 ? n : -1;
  return -1;
}

}  // namespace

bool wait_for_output_drained(double max_seconds) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(max_seconds);
  for (;;) {
    if (unread_output_bytes(STDOUT_FILENO) <= 0 && unread_output_bytes(STDERR_FILENO) <= 0)
      return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

[[noreturn]] void abort_mpi_job(int status, double drain_seconds) {
  wait_for_output_drained(drain_seconds);
  MPI_Abort(MPI_COMM_WORLD, status);
  std::_Exit(status);  // MPI_Abort does not return; should it, the process still ends
}

}  // namespace tessera::parallel
