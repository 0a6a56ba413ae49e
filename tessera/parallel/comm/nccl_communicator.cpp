#include "tessera/parallel/comm/detail/nccl_communicator.h"

#if defined(TESSERA_NCCL_SIMULATED)
#include "tessera/nccl_sim/nccl.h"
#else
#include <nccl.h>
#endif

#include <atomic>
#include <chrono>
#include <functional>

#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/movement.h"
#include "tessera/cuda/stream_order.h"
#include "tessera/parallel/comm/detail/poll_until_done.h"

// TESSERA_NCCL_CHECK(call): runs an NCCL call and throws tessera::Error naming the call, NCCL's
// error string and last message, and the file and line.
#define TESSERA_NCCL_CHECK(call)                                                                  \
  do {                                                                                            \
    const ncclResult_t tessera_nccl_status = (call);                                              \
    if (tessera_nccl_status != ncclSuccess) [[unlikely]]                                          \
      ::tessera::detail::throw_error(#call, " failed: ", ncclGetErrorString(tessera_nccl_status), \
                                     " (", ncclGetLastError(nullptr), ") at ", __FILE__, ":",     \
                                     __LINE__);                                                   \
  } while (0)

namespace tessera::parallel {

namespace {

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f16:
      return ncclFloat16;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
  }
  detail::throw_error("NCCL: unsupported dtype ", dtype_name(dtype));
}

ncclRedOp_t nccl_op(CommOp op) {
  switch (op) {
    case CommOp::sum:
      return ncclSum;
    case CommOp::max:
      return ncclMax;
    case CommOp::avg:
      return ncclAvg;
  }
  detail::throw_error("NCCL: unsupported reduction ", comm_op_name(op));
}

cudaStream_t as_stream(void* stream) {
  return static_cast<cudaStream_t>(stream);
}

#if defined(TESSERA_NCCL_SIMULATED)
constexpr bool kSimulatedNccl = true;
constexpr const char* kNcclKind = "the simulated NCCL (TESSERA_NCCL=simulated)";
#else
constexpr bool kSimulatedNccl = false;
constexpr const char* kNcclKind = "real NCCL (TESSERA_NCCL=real)";
#endif

// The backend's streams, refused when this build's NCCL cannot carry its tensors: real NCCL
// needs the GPU backend, the simulated one the simulated device.
cuda::StreamOrder& checked_stream_order(const std::string& group) {
  cuda::StreamOrder& order = cuda::stream_order();
  TESSERA_CHECK(order.simulated() == kSimulatedNccl, "NcclCommunicator (group ", group,
                "): this build's NCCL communicator is ", kNcclKind, ", but Device::cuda() is ",
                order.simulated() ? "the simulated device" : "a GPU",
                "; configure with -DTESSERA_NCCL=", order.simulated() ? "simulated" : "real",
                " for it");
  return order;
}

std::atomic<bool> g_missing_wait_planted{false};  // NcclCommunicator::plant_missing_wait

// An event recorded after a collective on the communication stream. The tensors it reads and
// writes are held until wait(): their storage returns to the compute stream's pool when freed,
// and wait() has ordered the compute stream after the collective by then.
class NcclWork final : public Work {
 public:
  NcclWork(cuda::StreamOrder& order, void* done, std::shared_ptr<ncclComm> comm, NcclWait mode,
           const CommOptions& options, double timeout_seconds,
           std::shared_ptr<CommHealth> health, std::string what,
           std::vector<Tensor> keep_alive)
      : order_(order),
        done_(done),
        comm_(std::move(comm)),
        mode_(mode),
        timeout_(timeout_seconds > 0 ? timeout_seconds : options.timeout_seconds),
        yield_(options.wait != CommWait::spin),
        health_(std::move(health)),
        what_(std::move(what)),
        keep_(std::move(keep_alive)),
        start_(std::chrono::steady_clock::now()) {}

  ~NcclWork() override {
    // Never waited for: still order the buffers' release after the collective. No throw from a
    // destructor; a broken device shows in the next checked call.
    try {
      if (!keep_.empty()) order_.stream_wait_event(order_.compute_stream(), done_);
      keep_.clear();
      order_.destroy_event(done_);
    } catch (const Error&) {
    }
  }

  bool test() override { return order_.event_done(done_); }
  bool on_comm_stream() const override { return true; }

  void wait() override {
    if (mode_ == NcclWait::blocking) block();
    if (g_missing_wait_planted.load()) {
      // The buffers are kept to the end of the process, so that the missing wait shows as
      // wrong numbers rather than as the collective writing freed memory.
      static auto* kept = new std::vector<Tensor>();
      kept->insert(kept->end(), keep_.begin(), keep_.end());
      keep_.clear();
      return;
    }
    order_.stream_wait_event(order_.compute_stream(), done_);
    keep_.clear();
  }

  // Polls the event (a short spin, then sleeps backing off to 100 us, as the MPI communicator
  // does) until it completes, NCCL reports an asynchronous error, or the timeout passes: then
  // the NCCL communicator is aborted (its kernels stop), the buffers are kept to the end of the
  // process, and CommError is thrown.
  void block() {
    auto done = [this] {
      if (test()) return true;
      ncclResult_t async = ncclSuccess;
      TESSERA_NCCL_CHECK(ncclCommGetAsyncError(comm_.get(), &async));
      TESSERA_CHECK(async == ncclSuccess || async == ncclInProgress, what_,
                    ": NCCL failed: ", ncclGetErrorString(async), " (",
                    ncclGetLastError(comm_.get()), ")");
      return false;
    };
    poll_until_done(
        done, timeout_, start_, [this] { return what_; }, *health_,
        [this] {
          ncclCommAbort(comm_.get());
          static auto* kept = new std::vector<Tensor>();
          kept->insert(kept->end(), keep_.begin(), keep_.end());
          keep_.clear();
        },
        yield_);
  }

 private:
  cuda::StreamOrder& order_;
  void* done_;
  std::shared_ptr<ncclComm> comm_;
  NcclWait mode_;
  double timeout_;
  bool yield_;
  std::shared_ptr<CommHealth> health_;
  std::string what_;
  std::vector<Tensor> keep_;
  std::chrono::steady_clock::time_point start_;
};

// Runs `finish` once, on the host thread that first sees `inner` complete (test or wait):
// work that follows a collective on the compute stream, such as a widening sum.
class FinishingWork final : public Work {
 public:
  FinishingWork(std::shared_ptr<Work> inner, std::function<void()> finish)
      : inner_(std::move(inner)), finish_(std::move(finish)) {}
  bool test() override {
    if (finish_ && inner_->test()) wait();
    return !finish_;
  }
  void wait() override {
    if (!finish_) return;
    inner_->wait();  // orders the compute stream after the collective
    finish_();
    finish_ = nullptr;
  }

 private:
  std::shared_ptr<Work> inner_;
  std::function<void()> finish_;
};

}  // namespace

std::shared_ptr<NcclCommunicator> NcclCommunicator::create(MPI_Comm mpi_comm,
                                                           const std::string& name,
                                                           CommOptions options, NcclWait wait) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  TESSERA_CHECK(initialized, "NcclCommunicator::create (group ", name, "): MPI is not ",
                "initialised; create a tessera::parallel::MpiSession in main() first (the NCCL ",
                "unique id travels over MPI)");
  int rank = 0, size = 1;
  MPI_Comm_rank(mpi_comm, &rank);
  MPI_Comm_size(mpi_comm, &size);
  try {
    cuda::stream_order().compute_stream();  // opens the device: no GPU fails here
    checked_stream_order(name);
  } catch (const Error& e) {
    detail::throw_error("NcclCommunicator::create (rank ", rank, " of group ", name, ", size ",
                        size, "): no CUDA device to put NCCL on: ", e.what());
  }

  ncclUniqueId id;
  if (rank == 0) TESSERA_NCCL_CHECK(ncclGetUniqueId(&id));
  const int rc = MPI_Bcast(&id, int(sizeof(id)), MPI_BYTE, 0, mpi_comm);
  TESSERA_CHECK(rc == MPI_SUCCESS, "NcclCommunicator::create (group ", name,
                "): MPI_Bcast of the NCCL unique id failed with code ", rc);
  ncclComm_t comm = nullptr;
  TESSERA_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
  return std::shared_ptr<NcclCommunicator>(
      new NcclCommunicator(comm, name, options, wait, nullptr, nullptr, nullptr));
}

NcclCommunicator::NcclCommunicator(ncclComm* comm, std::string name, CommOptions options,
                                   NcclWait wait, std::shared_ptr<std::atomic<int64_t>> step,
                                   std::shared_ptr<CommTraffic> traffic,
                                   std::shared_ptr<CommHealth> health)
    : Communicator(std::move(name), options, std::move(step), std::move(traffic),
                   std::move(health)),
      comm_(comm, [](ncclComm* c) { ncclCommDestroy(c); }),
      wait_(wait) {
  TESSERA_NCCL_CHECK(ncclCommUserRank(comm, &rank_));
  TESSERA_NCCL_CHECK(ncclCommCount(comm, &size_));
  TESSERA_NCCL_CHECK(ncclCommCuDevice(comm, &device_));
  order_ = &checked_stream_order(name_);
  TESSERA_CHECK(order_->device_index() == device_, "NcclCommunicator (group ", name_,
                "): the NCCL communicator is on cuda:", device_,
                " but CUDA tensors are on cuda:", order_->device_index());
}

NcclCommunicator::~NcclCommunicator() = default;

bool NcclCommunicator::simulated() {
  return kSimulatedNccl;
}

void NcclCommunicator::plant_missing_wait(bool planted) {
  g_missing_wait_planted.store(planted);
}

std::shared_ptr<Communicator> NcclCommunicator::do_split(int color, int key, const std::string& name) {
  TESSERA_CHECK(color >= 0, "split of group ", name_, " into ", name,
                ": color must be non-negative, got ", color);
  order_->compute_stream();  // makes the device current on this thread
  ncclComm_t child = nullptr;
  TESSERA_NCCL_CHECK(ncclCommSplit(comm_.get(), color, key, &child, nullptr));
  return std::shared_ptr<NcclCommunicator>(
      new NcclCommunicator(child, name, options_, wait_, step_, traffic_, health_));
}

template <class Issue>
std::shared_ptr<Work> NcclCommunicator::launch(std::string what, std::vector<Tensor> tensors,
                                               NcclWait wait, Issue&& issue,
                                               double timeout_seconds) {
  cuda::StreamOrder& order = *order_;
  void* compute = order.compute_stream();
  const cudaStream_t comm = as_stream(order.comm_stream());
  // The collective reads what the compute stream's kernels so far wrote.
  void* ready = order.record_event(compute);
  order.stream_wait_event(comm, ready);
  order.destroy_event(ready);  // released once the wait it feeds has run
  issue(comm);
  void* done = order.record_event(comm);
  return std::make_shared<NcclWork>(order, done, comm_, wait, options_, timeout_seconds, health_,
                                    std::move(what), std::move(tensors));
}

// CPU tensors (a step's loss totals, checkpoint entries) travel through device copies: the
// call runs on them and waits, and the outputs are copied back. Mixed devices are refused.
template <class Call>
std::shared_ptr<Work> NcclCommunicator::on_device(const char* collective,
                                                  const std::vector<Tensor>& tensors,
                                                  const std::vector<Tensor>& outputs, Call&& call) {
  bool all_cpu = true, all_cuda = true;
  for (const Tensor& t : tensors) {
    all_cpu = all_cpu && t.device().is_cpu();
    all_cuda = all_cuda && t.device() == Device::cuda(device_);
  }
  if (all_cuda) return call(tensors);
  TESSERA_CHECK(all_cpu, collective, " on group ", name_, ": the NCCL communicator carries ",
                "tensors on cuda:", device_, " (or CPU tensors, through copies), got ",
                tensors.front().describe(), tensors.size() > 1 ? " and " : "",
                tensors.size() > 1 ? tensors.back().describe() : std::string());
  std::vector<Tensor> staged;
  for (const Tensor& t : tensors) staged.push_back(ops::to(t, Device::cuda(device_)));
  call(staged)->wait();
  for (size_t i = 0; i < tensors.size(); ++i)
    for (const Tensor& out : outputs)
      if (out.is_same(tensors[i])) ops::copy_(out, staged[i]);
  return std::make_shared<CompletedWork>();  // the copies back waited for the results
}

void NcclCommunicator::do_barrier(double timeout_seconds) {
  Tensor token = zeros({1}, DType::i32, Device::cuda(device_));
  ncclComm_t comm = comm_.get();
  auto work = launch(describe_call("barrier", token), {token}, NcclWait::blocking,
                     [&](cudaStream_t stream) {
                       void* p = token.data_ptr("barrier");
                       TESSERA_NCCL_CHECK(ncclAllReduce(p, p, 1, ncclInt32, ncclSum, comm, stream));
                     },
                     timeout_seconds);
  work->wait();
}

std::shared_ptr<Work> NcclCommunicator::do_all_reduce(const Tensor& tensor, CommOp op) {
  return on_device("all_reduce", {tensor}, {tensor}, [&](const std::vector<Tensor>& t) {
    const Tensor& x = t[0];
    const std::string what = describe_call(str_cat("all_reduce ", comm_op_name(op)).c_str(), x);
    ncclComm_t comm = comm_.get();
    return launch(what, {x}, wait_, [&](cudaStream_t stream) {
      void* p = x.data_ptr("all_reduce");
      TESSERA_NCCL_CHECK(
          ncclAllReduce(p, p, size_t(x.numel()), nccl_type(x.dtype()), nccl_op(op), comm, stream));
    });
  });
}

std::shared_ptr<Work> NcclCommunicator::do_reduce_scatter(const Tensor& input, const Tensor& output,
                                                          CommOp op) {
  TESSERA_CHECK(op != CommOp::avg || is_floating(input.dtype()), "reduce_scatter avg on group ",
                name_, ": ", input.describe(), " is not floating");
  return on_device("reduce_scatter", {input, output}, {output}, [&](const std::vector<Tensor>& t) {
    const Tensor &in = t[0], &out = t[1];
    if (in.dtype() != out.dtype()) return widening_reduce_scatter(in, out, op);
    const std::string what =
        describe_call(str_cat("reduce_scatter ", comm_op_name(op)).c_str(), in);
    ncclComm_t comm = comm_.get();
    return launch(what, {in, out}, wait_, [&](cudaStream_t stream) {
      TESSERA_NCCL_CHECK(ncclReduceScatter(in.data_ptr("reduce_scatter"),
                                           out.data_ptr("reduce_scatter"), size_t(out.numel()),
                                           nccl_type(in.dtype()), nccl_op(op), comm, stream));
    });
  });
}

std::shared_ptr<Work> NcclCommunicator::widening_reduce_scatter(const Tensor& in,
                                                                const Tensor& out, CommOp op) {
  const int64_t chunk = out.numel();
  const Tensor flat_in = ops::reshape(in, {in.numel()});
  const Tensor parts = empty({chunk * size_}, in.dtype(), in.device());
  // This rank's own chunk never leaves it: a copy on the compute stream, which launch() orders
  // before the transfers.
  ops::copy_(ops::narrow(parts, 0, rank_ * chunk, chunk),
             ops::narrow(flat_in, 0, rank_ * chunk, chunk));
  const std::string what =
      describe_call(str_cat("reduce_scatter ", comm_op_name(op), " (widening)").c_str(), in);
  ncclComm_t comm = comm_.get();
  const ncclDataType_t type = nccl_type(in.dtype());
  const size_t bytes = size_t(chunk) * dtype_size(in.dtype());
  auto moved = launch(what, {in, parts}, wait_, [&](cudaStream_t stream) {
    auto* src = static_cast<const char*>(flat_in.data_ptr("reduce_scatter"));
    auto* dst = static_cast<char*>(parts.data_ptr("reduce_scatter"));
    TESSERA_NCCL_CHECK(ncclGroupStart());
    for (int peer = 0; peer < size_; ++peer) {
      if (peer == rank_) continue;
      TESSERA_NCCL_CHECK(
          ncclSend(src + size_t(peer) * bytes, size_t(chunk), type, peer, comm, stream));
      TESSERA_NCCL_CHECK(
          ncclRecv(dst + size_t(peer) * bytes, size_t(chunk), type, peer, comm, stream));
    }
    TESSERA_NCCL_CHECK(ncclGroupEnd());
  });
  const int n = size_;
  const Tensor flat_out = ops::reshape(out, {chunk});
  return std::make_shared<FinishingWork>(std::move(moved), [parts, flat_out, chunk, n, op] {
    const Tensor wide = ops::cast(parts, flat_out.dtype());  // exact
    ops::copy_(flat_out, ops::narrow(wide, 0, 0, chunk));
    for (int j = 1; j < n; ++j) ops::add_(flat_out, ops::narrow(wide, 0, int64_t(j) * chunk, chunk));
    if (op == CommOp::avg) ops::mul_(flat_out, 1.0 / n);
  });
}

std::shared_ptr<Work> NcclCommunicator::do_all_gather(const Tensor& input, const Tensor& output) {
  return on_device("all_gather", {input, output}, {output}, [&](const std::vector<Tensor>& t) {
    const Tensor &in = t[0], &out = t[1];
    ncclComm_t comm = comm_.get();
    return launch(describe_call("all_gather", in), {in, out}, wait_, [&](cudaStream_t stream) {
      TESSERA_NCCL_CHECK(ncclAllGather(in.data_ptr("all_gather"), out.data_ptr("all_gather"),
                                       size_t(in.numel()), nccl_type(in.dtype()), comm, stream));
    });
  });
}

std::shared_ptr<Work> NcclCommunicator::do_broadcast(const Tensor& tensor, int root) {
  return on_device("broadcast", {tensor}, {tensor}, [&](const std::vector<Tensor>& t) {
    const Tensor& x = t[0];
    ncclComm_t comm = comm_.get();
    return launch(describe_call("broadcast", x), {x}, wait_, [&](cudaStream_t stream) {
      void* p = x.data_ptr("broadcast");
      TESSERA_NCCL_CHECK(
          ncclBroadcast(p, p, size_t(x.numel()), nccl_type(x.dtype()), root, comm, stream));
    });
  });
}

// NCCL has no tags: between two ranks, sends and receives match in the order they are issued.
// Each transfer is its own group, so a rank that sends to and receives from the same peer must
// issue the two in the opposite order to the peer's (or the streams wait on each other): the
// pipeline executor issues its transfers in nccl_issue_order (pipeline/nccl_order.h).
std::shared_ptr<Work> NcclCommunicator::do_send(const Tensor& tensor, int dst, int tag) {
  return on_device("send", {tensor}, {}, [&](const std::vector<Tensor>& t) {
    const Tensor& x = t[0];
    ncclComm_t comm = comm_.get();
    return launch(describe_call(str_cat("send to ", dst).c_str(), x), {x}, wait_,
                  [&](cudaStream_t stream) {
                    TESSERA_NCCL_CHECK(ncclGroupStart());
                    TESSERA_NCCL_CHECK(ncclSend(x.data_ptr("send"), size_t(x.numel()),
                                                nccl_type(x.dtype()), dst, comm, stream));
                    TESSERA_NCCL_CHECK(ncclGroupEnd());
                  });
  });
}

std::shared_ptr<Work> NcclCommunicator::do_recv(const Tensor& tensor, int src, int tag) {
  return on_device("recv", {tensor}, {tensor}, [&](const std::vector<Tensor>& t) {
    const Tensor& x = t[0];
    ncclComm_t comm = comm_.get();
    return launch(describe_call(str_cat("recv from ", src).c_str(), x), {x}, wait_,
                  [&](cudaStream_t stream) {
                    TESSERA_NCCL_CHECK(ncclGroupStart());
                    TESSERA_NCCL_CHECK(ncclRecv(x.data_ptr("recv"), size_t(x.numel()),
                                                nccl_type(x.dtype()), src, comm, stream));
                    TESSERA_NCCL_CHECK(ncclGroupEnd());
                  });
  });
}

}  // namespace tessera::parallel
