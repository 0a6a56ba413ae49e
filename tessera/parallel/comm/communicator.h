#pragma once
// Communicator: collectives and point-to-point transfers among a group of ranks.
//
// One interface, three implementations: LocalCommunicator (a group of one, for single-process
// runs), MpiCommunicator (CPU tensors, MPICH) and NcclCommunicator (CUDA tensors). Every call
// has an async form returning a Work handle; the blocking form is async + wait().
//
// Waiting has a timeout (CommOptions::timeout_seconds). A collective that does not finish in
// time, or fails in the transport, throws CommError naming the rank, group, collective and
// training step, and leaves its group and every group split from the same world broken: later
// calls throw at once (comm_health.h). The library never ends the process; its caller does.
//
// Every call on a group of more than one rank is recorded in the rank's flight recorder
// (flight_recorder.h): queued when issued, started when a wait blocks on it, completed or
// failed. A group and every group split from it share one recorder.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "tessera/core/tensor.h"
#include "tessera/parallel/comm/comm_health.h"
#include "tessera/parallel/comm/flight_recorder.h"
#include "tessera/parallel/comm/traffic.h"

namespace tessera::parallel {

enum class CommOp : uint8_t { sum, max, avg };
const char* comm_op_name(CommOp op);

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation completes; throws CommError past the timeout or on a failure.
  virtual void wait() = 0;
  // True once complete; never blocks.
  virtual bool test() = 0;
  // True when the results are written on the device's communication stream in issue order
  // (NCCL): a copy queued on that stream after this call reads them with no host wait. False
  // when they land on the host's time or through the compute stream (MPI, threads, a widening
  // sum finished on the compute stream): wait for test() or wait() first.
  virtual bool on_comm_stream() const { return false; }
};

// A Work that is already complete (size-one groups, empty tensors).
class CompletedWork final : public Work {
 public:
  void wait() override {}
  bool test() override { return true; }
};

// How a blocking wait waits. spin polls without pause, the lowest latency while every rank has
// a core (MPI progresses only inside MPI calls, so a rank that sleeps stalls the peer that
// waits on it: a 1 KiB all-reduce took ~240 us with sleeps against MPI's 1.8 us). yield
// sleeps with backoff between polls, so ranks oversubscribed on few cores hand theirs to the
// peer they wait on. automatic: the MPI world resolves it once, to yield when its node runs
// more ranks than the cores this process may use, else spin; the environment variable
// TESSERA_COMM_WAIT=spin|yield|auto forces it either way.
enum class CommWait : uint8_t { automatic, spin, yield };
const char* comm_wait_name(CommWait wait);
// "auto", "spin" or "yield"; throws naming `where` and the value otherwise.
CommWait parse_comm_wait(const std::string& value, const std::string& where);

struct CommOptions {
  double timeout_seconds = 600.0;
  CommWait wait = CommWait::automatic;
  // MPI only: groups up to this size move float sums and gathers as point-to-point exchanges
  // (comm/detail/mpi_exchange.h), larger ones through MPI's collectives. The bits are the
  // same either way.
  int mpi_exchange_max_ranks = 16;
  // Whether calls are recorded in the flight recorder (on by default: its cost is measured in
  // bench/bench_flight_recorder.cpp; off is the reference it is measured against).
  bool record_flight = true;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "world", "dp", "tp", "pp", "embedding": used in timeout and error messages.
  const std::string& name() const { return name_; }

  // x = op over the group of x, in place. x is contiguous.
  std::shared_ptr<Work> all_reduce_async(const Tensor& x, CommOp op = CommOp::sum);
  // in has size() * n elements; out (n elements) receives this rank's chunk of the reduction.
  // Widening: a bf16 or f16 `in` may reduce (sum, avg) into an f32 `out`. The 16-bit values
  // travel, and each rank sums the chunks it receives in f32, in rank order (gradient
  // compression: half the bytes of an f32 reduce-scatter, without 16-bit partial sums).
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& in, const Tensor& out,
                                             CommOp op = CommOp::sum);
  // in has n elements; out (size() * n) receives every rank's in, in rank order.
  std::shared_ptr<Work> all_gather_async(const Tensor& in, const Tensor& out);
  std::shared_ptr<Work> broadcast_async(const Tensor& x, int root);
  std::shared_ptr<Work> send_async(const Tensor& x, int dst, int tag);
  std::shared_ptr<Work> recv_async(const Tensor& x, int src, int tag);

  void all_reduce(const Tensor& x, CommOp op = CommOp::sum) { all_reduce_async(x, op)->wait(); }
  void reduce_scatter(const Tensor& in, const Tensor& out, CommOp op = CommOp::sum) {
    reduce_scatter_async(in, out, op)->wait();
  }
  void all_gather(const Tensor& in, const Tensor& out) { all_gather_async(in, out)->wait(); }
  void broadcast(const Tensor& x, int root) { broadcast_async(x, root)->wait(); }
  void send(const Tensor& x, int dst, int tag = 0) { send_async(x, dst, tag)->wait(); }
  void recv(const Tensor& x, int src, int tag = 0) { recv_async(x, src, tag)->wait(); }
  // Returns once every rank has entered it. timeout_seconds > 0 replaces the group's timeout
  // for this call (the wait after a checkpoint save, which may be long); 0 keeps it.
  void barrier(double timeout_seconds = 0);

  // Whether point-to-point transfers follow NCCL's semantics: no tags (the transfers between
  // two ranks match in the order they are issued) and a transfer holds its stream until its
  // peer's is issued too. A pipeline then issues its transfers in nccl_issue_order
  // (pipeline/nccl_order.h). MPI's tagged, asynchronous sends need no such order.
  virtual bool transfers_in_issue_order() const { return false; }

  // The group of ranks that passed the same color, ordered by key (collective over this
  // group). The child shares this communicator's step counter, options and flight recorder.
  std::shared_ptr<Communicator> split(int color, int key, const std::string& name);

  // The training step named in timeout messages (shared with every split of this group).
  void set_step(int64_t step) { step_->store(step); }
  int64_t step() const { return step_->load(); }
  const CommOptions& options() const { return options_; }

  // Whether a collective of this group, or of any group of its family (split from the same
  // world), timed out or failed; the first failure's message. Every call of a broken group
  // throws CommError.
  bool broken() const { return health_->broken(); }
  std::string broken_reason() const { return health_->reason(); }
  const std::shared_ptr<CommHealth>& shared_health() const { return health_; }

  // The bytes this rank handed to collectives, shared with every group split from this one
  // (traffic.h). A wrapper (TimedCommunicator) shows the traffic of the group it wraps.
  CommTraffic& traffic() const { return *traffic_; }
  const std::shared_ptr<CommTraffic>& shared_traffic() const { return traffic_; }

  // This rank's record of its calls, shared with every group split from this one (created on
  // first use). flight_key() names this group instance alike on every member: "world",
  // "world/dp:1" (the split's name and this rank's color).
  const std::shared_ptr<FlightRecorder>& flight_recorder();
  std::string flight_key() const { return flight_key_.empty() ? name_ : flight_key_; }

 protected:
  // step, traffic and health: a parent's, for a split (null: this group starts its own).
  Communicator(std::string name, CommOptions options,
               std::shared_ptr<std::atomic<int64_t>> step = nullptr,
               std::shared_ptr<CommTraffic> traffic = nullptr,
               std::shared_ptr<CommHealth> health = nullptr);

  // Implementations get validated arguments (defined, contiguous, on a supported device,
  // sizes consistent).
  virtual std::shared_ptr<Communicator> do_split(int color, int key, const std::string& name) = 0;
  virtual std::shared_ptr<Work> do_all_reduce(const Tensor& x, CommOp op) = 0;
  virtual std::shared_ptr<Work> do_reduce_scatter(const Tensor& in, const Tensor& out,
                                                  CommOp op) = 0;
  virtual std::shared_ptr<Work> do_all_gather(const Tensor& in, const Tensor& out) = 0;
  virtual std::shared_ptr<Work> do_broadcast(const Tensor& x, int root) = 0;
  virtual std::shared_ptr<Work> do_send(const Tensor& x, int dst, int tag) = 0;
  virtual std::shared_ptr<Work> do_recv(const Tensor& x, int src, int tag) = 0;
  // timeout_seconds: the wait's limit (positive).
  virtual void do_barrier(double timeout_seconds) = 0;

  // "rank 3 of group tp (size 2), all_reduce of f32[1024] on cpu, step 17"
  std::string describe_call(const char* collective, const Tensor& x) const;

  std::string name_;
  CommOptions options_;
  std::shared_ptr<std::atomic<int64_t>> step_;
  std::shared_ptr<CommTraffic> traffic_;
  std::shared_ptr<CommHealth> health_;
  // False for a wrapper whose calls the wrapped group counts already.
  bool counts_traffic_ = true;
  // False for a wrapper whose calls the wrapped group records already; it shares that group's
  // recorder (set_flight_recorder).
  bool records_flight_ = true;
  void set_flight_recorder(std::shared_ptr<FlightRecorder> recorder);

 private:
  void count(CommKind kind, const Tensor& message);
  // Records the call, issues it, and returns its Work wrapped so that waits and tests move
  // the record along. bytes: the message as traffic.h counts it.
  template <class Issue>
  std::shared_ptr<Work> recorded(const char* op, const char* reduce, int64_t bytes,
                                 const Tensor& x, int peer, Issue&& issue);
  int flight_group();

  std::once_flag recorder_once_, group_once_;
  std::shared_ptr<FlightRecorder> recorder_;
  std::string flight_key_;  // "" for a group made by no split: then its name
  int flight_group_ = -1;
};

}  // namespace tessera::parallel
