#pragma once
// MPI communicator for CPU tensors (MPICH). A blocking wait polls the request (MPI progresses
// only inside MPI calls): it spins while every rank has a core, and sleeps with backoff when
// the node is oversubscribed (CommWait), checking the timeout either way.
//
// Floating-point sums add the ranks' values left to right in rank order, so every rank
// receives bit-identical values (replicas never drift) and the bits do not depend on the
// message size or MPI's algorithm: above 8 KiB as a reduce-scatter (each chunk summed once, by
// its owner) then an all-gather; up to 8 KiB in one round, every rank summing all n copies. In groups of up to CommOptions::mpi_exchange_max_ranks the data moves as
// point-to-point exchanges (detail/mpi_exchange.h), past it through MPI's collectives.

#include <mpi.h>

#include <memory>

#include "tessera/parallel/comm/communicator.h"

namespace tessera::parallel {

// Initialises MPI (MPI_THREAD_MULTIPLE) for the life of the object, unless the host program
// already did, in which case it leaves init and finalize to the host. Create one in main()
// before any MpiCommunicator. When a communicator of the process broke (a collective timed out
// or failed: comm_health.h), the destructor ends the job with MPI_Abort(kBrokenCommExit)
// rather than MPI_Finalize, which would wait on the abandoned collective.
inline constexpr int kBrokenCommExit = 124;

// Ends the whole job from this rank with MPI_Abort(status), after flushing stdout and stderr
// and waiting up to `drain_seconds` until the launcher has read them: MPI_Abort kills every
// process at once, and mpiexec drops output its proxy had not read yet (mpi_abort.cpp).
[[noreturn]] void abort_mpi_job(int status, double drain_seconds = 2.0);
// Flushes stdout and stderr and waits up to `max_seconds` until their readers (where they are
// pipes or sockets) have consumed every byte; false when the time ran out.
bool wait_for_output_drained(double max_seconds);

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool owns_ = false;
};

class MpiCommunicator final : public Communicator {
 public:
  // MPI_COMM_WORLD; MPI must be initialised (see MpiSession). With options.wait automatic
  // (and TESSERA_COMM_WAIT unset) the process's first call is collective: it counts the ranks
  // on each node to choose spin or yield (CommWait); later calls are not.
  static std::shared_ptr<MpiCommunicator> world(CommOptions options = {});
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::shared_ptr<Communicator> do_split(int color, int key, const std::string& name) override;
  MPI_Comm comm() const { return comm_; }

 protected:
  std::shared_ptr<Work> do_all_reduce(const Tensor& x, CommOp op) override;
  std::shared_ptr<Work> do_reduce_scatter(const Tensor& in, const Tensor& out, CommOp op) override;
  std::shared_ptr<Work> do_all_gather(const Tensor& in, const Tensor& out) override;
  std::shared_ptr<Work> do_broadcast(const Tensor& x, int root) override;
  std::shared_ptr<Work> do_send(const Tensor& x, int dst, int tag) override;
  std::shared_ptr<Work> do_recv(const Tensor& x, int src, int tag) override;
  void do_barrier(double timeout_seconds) override;

 private:
  MpiCommunicator(MPI_Comm comm, bool owned, std::string name, CommOptions options,
                  std::shared_ptr<std::atomic<int64_t>> step,
                  std::shared_ptr<CommTraffic> traffic, std::shared_ptr<CommHealth> health);
  // The tag of the next call that moves its data as point-to-point exchanges, or -1 where the
  // group is too large for them (mpi_exchange.h); called once per such call, in issue order.
  int exchange_tag();
  static std::shared_ptr<std::atomic<uint32_t>> world_exchange_calls();

  MPI_Comm comm_;
  bool owned_;
  std::shared_ptr<std::atomic<uint32_t>> exchange_calls_;  // the calls that took a tag
  int rank_ = 0, size_ = 1;
};

}  // namespace tessera::parallel
