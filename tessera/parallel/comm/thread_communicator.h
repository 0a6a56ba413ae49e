#pragma once
// ThreadCommunicator: N ranks as N threads of one process, over shared memory.
//
// The same Communicator interface as MPI (every collective, tagged send/recv, barrier, split,
// the step counter and the timeout), so a whole layout (dp x pp x tp) runs in one process: one
// debugger sees every rank, a sanitizer sees every rank, and no MPI is needed. run_ranks
// (comm/run_ranks.h) starts the threads; that is the entry point:
//
//   run_ranks(8, [&](std::shared_ptr<Communicator> world) {
//     ParallelTrainer trainer(world, model, config);  // mesh {2, 2, 2}
//     ...
//   });
//
// Semantics, and where they differ from MPI:
//  - Collectives match by issue order within a group (as MPI requires of its callers). A rank
//    whose call differs from its peers' (another collective, dtype, size, op or root) gets an
//    error naming both calls, where MPI would hang or corrupt memory.
//  - Reductions run in rank order (x0 + x1 + ... + x{n-1}) on whichever rank issues last, and
//    every rank receives the same bits, whatever the threads' timing. avg is the sum times
//    1/n, as MPI does. max propagates NaN. 16-bit floats are carried but not reduced, as
//    with MPI. A float sum is not guaranteed to round the way MPICH's algorithm does.
//  - Sends are buffered: send completes at once (a copy is queued until the matching recv),
//    like MPI's eager protocol at any size. A pairing that needs MPI's rendezvous (two large
//    blocking sends facing each other) does not deadlock here but would under MPI.
//  - recv matches sends by (source, tag) in issue order; the sizes and dtypes must agree.
//  - CPU tensors only. Every rank shares the process: the CPU allocator's counters are
//    process-wide, and each rank's OpenMP team adds up (set OMP_NUM_THREADS=1 or
//    set_num_threads(1) in each rank).
//  - A rank that fails (fail(), or an exception out of run_ranks' body) marks the whole
//    world failed: every wait that cannot complete then throws "rank k failed: ..." instead
//    of hanging until the timeout.
//  - A wait past CommOptions::timeout_seconds throws the same CommError as MPI's (rank, group,
//    collective, step) and breaks the rank's groups (comm_health.h).

#include <memory>
#include <string>
#include <vector>

#include "tessera/parallel/comm/communicator.h"

namespace tessera::parallel {

namespace thread_comm {
struct Group;
struct Call;
struct Pending;
}  // namespace thread_comm

class ThreadCommunicator final : public Communicator {
 public:
  // The n communicators of one new world ("world"), one per rank: hand communicator k to the
  // thread that runs rank k (run_ranks does).
  static std::vector<std::shared_ptr<ThreadCommunicator>> create_world(int n,
                                                                       CommOptions options = {});
  ~ThreadCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override;
  std::shared_ptr<Communicator> do_split(int color, int key, const std::string& name) override;

  // Marks the whole world (this group, its parent and every split) failed by this rank: every
  // wait on any rank that is not complete, now or later, throws "rank k failed: why". The
  // first failure is kept. Rank k is the rank in the world.
  void fail(const std::string& why);
  // The first failure, "" while none: "rank k failed: why".
  std::string failure() const;

 protected:
  std::shared_ptr<Work> do_all_reduce(const Tensor& x, CommOp op) override;
  std::shared_ptr<Work> do_reduce_scatter(const Tensor& in, const Tensor& out, CommOp op) override;
  std::shared_ptr<Work> do_all_gather(const Tensor& in, const Tensor& out) override;
  std::shared_ptr<Work> do_broadcast(const Tensor& x, int root) override;
  std::shared_ptr<Work> do_send(const Tensor& x, int dst, int tag) override;
  std::shared_ptr<Work> do_recv(const Tensor& x, int src, int tag) override;
  void do_barrier(double timeout_seconds) override;

 private:
  ThreadCommunicator(std::shared_ptr<thread_comm::Group> group, int rank, std::string name,
                     CommOptions options, std::shared_ptr<std::atomic<int64_t>> step,
                     std::shared_ptr<CommTraffic> traffic, std::shared_ptr<CommHealth> health);
  // Registers this rank's part of the group's next collective; the last rank runs it.
  std::shared_ptr<thread_comm::Pending> issue_pending(thread_comm::Call call);
  std::shared_ptr<Work> issue(thread_comm::Call call, std::string what, const Tensor& shown);

  std::shared_ptr<thread_comm::Group> group_;
  int rank_;
};

}  // namespace tessera::parallel
