#pragma once
// NCCL communicator for CUDA tensors (the MPI communicator carries CPU tensors).
//
// One source over real NCCL or the simulated one (tessera/nccl_sim, over MPI between ranks
// that each have a simulated device), chosen at configure time (TESSERA_NCCL=real|simulated);
// it orders its work through the backend's StreamOrder (tessera/cuda/stream_order.h), never
// through cudart itself. CPU tensors are carried through device copies, and the call waits.
//
// Creation is collective over an MPI communicator: rank 0 makes the NCCL unique id, MPI_Bcast
// carries it to the others and each calls ncclCommInitRank on the device Device::cuda() tensors
// live on (call tessera::cuda::init_device(local_rank) first; NCCL allows one rank per GPU).
// So the processes start under mpiexec or srun like the MPI ones. Sub-groups (the mesh's dp,
// tp, pp) come from split(), which is ncclCommSplit of the parent: no MPI involved.
//
// Ordering: a collective is queued on the backend's communication stream after an event
// recorded on its compute stream, so it reads what the kernels before it wrote. Its Work
// records an event after it. wait() in the default stream-ordered mode makes the compute
// stream wait on that event and returns at once (no host block; the result is ready for every
// later kernel). In blocking mode wait() polls the event with the communicator's timeout; on
// timeout it aborts the NCCL communicator and throws the same CommError as the MPI
// communicator (rank, group, collective, step; comm_health.h). A hang in stream-ordered mode shows in the
// next host synchronisation instead, which has no timeout: use blocking mode to diagnose one.
// barrier() always blocks, with its timeout.

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "tessera/parallel/comm/communicator.h"

struct ncclComm;  // nccl.h: typedef struct ncclComm* ncclComm_t

namespace tessera::cuda {
class StreamOrder;
}

namespace tessera::parallel {

enum class NcclWait : uint8_t {
  stream,    // wait() orders the compute stream after the collective; the host does not block
  blocking,  // wait() blocks the host until the collective is done, with the timeout
};

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `mpi_comm` (MPI must be initialised, see MpiSession); the group's ranks are
  // the MPI ranks. `name` is used in error and timeout messages.
  static std::shared_ptr<NcclCommunicator> create(MPI_Comm mpi_comm, const std::string& name,
                                                  CommOptions options = {},
                                                  NcclWait wait = NcclWait::stream);
  ~NcclCommunicator() override;

  // Whether this build's NCCL is the simulated one (TESSERA_NCCL=simulated, for simulated
  // devices) rather than real NCCL (for GPUs): each carries only its own kind of device.
  static bool simulated();

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const { return device_; }
  NcclWait wait_mode() const { return wait_; }
  bool transfers_in_issue_order() const override { return true; }

  // Tests only: Work::wait() leaves out the one stream_wait_event that orders the compute
  // stream after a collective, so a test can show that the simulator's deferred streams turn
  // that missing wait into wrong results (tests/parallel/nccl_sim_test.cpp).
  static void plant_missing_wait(bool planted);
  // ncclCommSplit: collective over this group; the child keeps the wait mode and options.
  std::shared_ptr<Communicator> do_split(int color, int key, const std::string& name) override;

 protected:
  std::shared_ptr<Work> do_all_reduce(const Tensor& x, CommOp op) override;
  std::shared_ptr<Work> do_reduce_scatter(const Tensor& in, const Tensor& out, CommOp op) override;
  std::shared_ptr<Work> do_all_gather(const Tensor& in, const Tensor& out) override;
  std::shared_ptr<Work> do_broadcast(const Tensor& x, int root) override;
  std::shared_ptr<Work> do_send(const Tensor& x, int dst, int tag) override;
  std::shared_ptr<Work> do_recv(const Tensor& x, int src, int tag) override;
  // A one-element all-reduce, waited for on the host (with the timeout).
  void do_barrier(double timeout_seconds) override;

 private:
  // Takes ownership of `comm` (ncclCommDestroy when the last user, a Work included, is gone).
  NcclCommunicator(ncclComm* comm, std::string name, CommOptions options, NcclWait wait,
                   std::shared_ptr<std::atomic<int64_t>> step,
                   std::shared_ptr<CommTraffic> traffic, std::shared_ptr<CommHealth> health);

  // Queues `issue(stream)` on the communication stream after the compute stream's work so far,
  // and returns the Work that completes after it. `what` is the call as timeout messages name it.
  template <class Issue>
  // timeout_seconds > 0 replaces the group's timeout (a blocking wait's).
  std::shared_ptr<Work> launch(std::string what, std::vector<Tensor> tensors, NcclWait wait,
                               Issue&& issue, double timeout_seconds = 0);
  // call(tensors) for tensors on this communicator's device; CPU tensors go through device
  // copies, `outputs` (some of `tensors`) copied back before it returns.
  template <class Call>
  std::shared_ptr<Work> on_device(const char* collective, const std::vector<Tensor>& tensors,
                                  const std::vector<Tensor>& outputs, Call&& call);

  // A bf16/f16 `in` reduced into an f32 `out` (on the device): the chunks move with grouped
  // sends and receives (an all-to-all), then this rank sums them in f32, in rank order, on the
  // compute stream. ncclReduceScatter would add in 16 bits at every hop.
  std::shared_ptr<Work> widening_reduce_scatter(const Tensor& in, const Tensor& out, CommOp op);

  std::shared_ptr<ncclComm> comm_;
  NcclWait wait_;
  int rank_ = 0, size_ = 1, device_ = 0;
  cuda::StreamOrder* order_ = nullptr;  // the backend's streams and events
};

}  // namespace tessera::parallel
