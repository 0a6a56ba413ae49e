#include "tessera/parallel/comm/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>

#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/cuda/backend/cuda_check.h"
#include "tessera/cuda/cuda.h"
#include "tessera/parallel/comm/poll_until_done.h"

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

// An event recorded after a collective on the communication stream. The tensors it reads and
// writes are held until wait(): their storage returns to the compute stream's pool when freed,
// and wait() has ordered the compute stream after the collective by then.
class NcclWork final : public Work {
 public:
  NcclWork(cudaEvent_t done, cudaStream_t compute, std::shared_ptr<ncclComm> comm, NcclWait mode,
           double timeout, std::string what, std::vector<Tensor> keep_alive)
      : done_(done),
        compute_(compute),
        comm_(std::move(comm)),
        mode_(mode),
        timeout_(timeout),
        what_(std::move(what)),
        keep_(std::move(keep_alive)),
        start_(std::chrono::steady_clock::now()) {}

  ~NcclWork() override {
    // Never waited for: still order the buffers' release after the collective. No throw from a
    // destructor; a broken device shows in the next checked call.
    if (!keep_.empty()) cudaStreamWaitEvent(compute_, done_, 0);
    keep_.clear();
    cudaEventDestroy(done_);
  }

  bool test() override {
    const cudaError_t status = cudaEventQuery(done_);
    if (status == cudaErrorNotReady) return false;
    TESSERA_CUDA_CHECK(status);
    return true;
  }

  void wait() override {
    if (mode_ == NcclWait::blocking) block();
    TESSERA_CUDA_CHECK(cudaStreamWaitEvent(compute_, done_, 0));
    keep_.clear();
  }

  // Polls the event (a short spin, then sleeps backing off to 100 us, as the MPI communicator
  // does) until it completes, NCCL reports an asynchronous error, or the timeout aborts the job.
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
    poll_until_done(done, timeout_, start_, [this] { return what_; }, [this] {
      ncclCommAbort(comm_.get());
      MPI_Abort(MPI_COMM_WORLD, 124);
    });
  }

 private:
  cudaEvent_t done_;
  cudaStream_t compute_;
  std::shared_ptr<ncclComm> comm_;
  NcclWait mode_;
  double timeout_;
  std::string what_;
  std::vector<Tensor> keep_;
  std::chrono::steady_clock::time_point start_;
};

cudaEvent_t new_event() {
  cudaEvent_t event = nullptr;
  TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

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
  const int devices = cuda::device_count();
  TESSERA_CHECK(devices > 0, "NcclCommunicator::create (rank ", rank, " of group ", name, ", size ",
                size, "): no CUDA device is visible (no GPU, or no driver); NCCL ",
                "carries CUDA tensors only, use the MPI communicator for CPU tensors");
  const cuda::DeviceStreams streams = cuda::device_streams();

  ncclUniqueId id;
  if (rank == 0) TESSERA_NCCL_CHECK(ncclGetUniqueId(&id));
  const int rc = MPI_Bcast(&id, int(sizeof(id)), MPI_BYTE, 0, mpi_comm);
  TESSERA_CHECK(rc == MPI_SUCCESS, "NcclCommunicator::create (group ", name,
                "): MPI_Bcast of the NCCL unique id failed with code ", rc);
  TESSERA_CUDA_CHECK(cudaSetDevice(streams.device));
  ncclComm_t comm = nullptr;
  TESSERA_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
  return std::shared_ptr<NcclCommunicator>(
      new NcclCommunicator(comm, name, options, wait, nullptr));
}

NcclCommunicator::NcclCommunicator(ncclComm* comm, std::string name, CommOptions options,
                                   NcclWait wait, std::shared_ptr<std::atomic<int64_t>> step)
    : Communicator(std::move(name), options, std::move(step)),
      comm_(comm, [](ncclComm* c) { ncclCommDestroy(c); }),
      wait_(wait) {
  TESSERA_NCCL_CHECK(ncclCommUserRank(comm, &rank_));
  TESSERA_NCCL_CHECK(ncclCommCount(comm, &size_));
  TESSERA_NCCL_CHECK(ncclCommCuDevice(comm, &device_));
  const cuda::DeviceStreams streams = cuda::device_streams();
  TESSERA_CHECK(streams.device == device_, "NcclCommunicator (group ", name_,
                "): the NCCL communicator is on cuda:", device_,
                " but CUDA tensors are on cuda:", streams.device);
  compute_stream_ = streams.compute;
  comm_stream_ = streams.comm;
}

NcclCommunicator::~NcclCommunicator() = default;

std::shared_ptr<Communicator> NcclCommunicator::split(int color, int key, const std::string& name) {
  TESSERA_CHECK(color >= 0, "split of group ", name_, " into ", name,
                ": color must be non-negative, got ", color);
  TESSERA_CUDA_CHECK(cudaSetDevice(device_));
  ncclComm_t child = nullptr;
  TESSERA_NCCL_CHECK(ncclCommSplit(comm_.get(), color, key, &child, nullptr));
  return std::shared_ptr<NcclCommunicator>(
      new NcclCommunicator(child, name, options_, wait_, step_));
}

template <class Issue>
std::shared_ptr<Work> NcclCommunicator::launch(const char* collective, std::string what,
                                               std::vector<Tensor> tensors, NcclWait wait,
                                               Issue&& issue) {
  for (const Tensor& t : tensors)
    TESSERA_CHECK(t.device().is_cuda(), collective, " on group ", name_,
                  ": the NCCL communicator carries CUDA tensors, got ", t.describe(),
                  "; use the MPI communicator for CPU tensors");
  const cudaStream_t compute = as_stream(compute_stream_), comm = as_stream(comm_stream_);
  TESSERA_CUDA_CHECK(cudaSetDevice(device_));
  // The collective reads what the compute stream's kernels so far wrote.
  cudaEvent_t ready = new_event();
  TESSERA_CUDA_CHECK(cudaEventRecord(ready, compute));
  TESSERA_CUDA_CHECK(cudaStreamWaitEvent(comm, ready, 0));
  TESSERA_CUDA_CHECK(cudaEventDestroy(ready));  // released once the wait it feeds has run
  issue(comm);
  cudaEvent_t done = new_event();
  TESSERA_CUDA_CHECK(cudaEventRecord(done, comm));
  return std::make_shared<NcclWork>(done, compute, comm_, wait, options_.timeout_seconds,
                                    std::move(what), std::move(tensors));
}

void NcclCommunicator::barrier() {
  Tensor token = zeros({1}, DType::i32, Device::cuda(device_));
  ncclComm_t comm = comm_.get();
  auto work = launch("barrier", describe_call("barrier", token), {token}, NcclWait::blocking,
                     [&](cudaStream_t stream) {
                       void* p = token.data_ptr("barrier");
                       TESSERA_NCCL_CHECK(ncclAllReduce(p, p, 1, ncclInt32, ncclSum, comm, stream));
                     });
  work->wait();
}

std::shared_ptr<Work> NcclCommunicator::do_all_reduce(const Tensor& x, CommOp op) {
  const std::string what = describe_call(str_cat("all_reduce ", comm_op_name(op)).c_str(), x);
  ncclComm_t comm = comm_.get();
  return launch("all_reduce", what, {x}, wait_, [&](cudaStream_t stream) {
    void* p = x.data_ptr("all_reduce");
    TESSERA_NCCL_CHECK(
        ncclAllReduce(p, p, size_t(x.numel()), nccl_type(x.dtype()), nccl_op(op), comm, stream));
  });
}

std::shared_ptr<Work> NcclCommunicator::do_reduce_scatter(const Tensor& in, const Tensor& out,
                                                          CommOp op) {
  TESSERA_CHECK(op != CommOp::avg || is_floating(in.dtype()), "reduce_scatter avg on group ", name_,
                ": ", in.describe(), " is not floating");
  const std::string what = describe_call(str_cat("reduce_scatter ", comm_op_name(op)).c_str(), in);
  ncclComm_t comm = comm_.get();
  return launch("reduce_scatter", what, {in, out}, wait_, [&](cudaStream_t stream) {
    TESSERA_NCCL_CHECK(ncclReduceScatter(in.data_ptr("reduce_scatter"),
                                         out.data_ptr("reduce_scatter"), size_t(out.numel()),
                                         nccl_type(in.dtype()), nccl_op(op), comm, stream));
  });
}

std::shared_ptr<Work> NcclCommunicator::do_all_gather(const Tensor& in, const Tensor& out) {
  ncclComm_t comm = comm_.get();
  return launch(
      "all_gather", describe_call("all_gather", in), {in, out}, wait_, [&](cudaStream_t stream) {
        TESSERA_NCCL_CHECK(ncclAllGather(in.data_ptr("all_gather"), out.data_ptr("all_gather"),
                                         size_t(in.numel()), nccl_type(in.dtype()), comm, stream));
      });
}

std::shared_ptr<Work> NcclCommunicator::do_broadcast(const Tensor& x, int root) {
  ncclComm_t comm = comm_.get();
  return launch("broadcast", describe_call("broadcast", x), {x}, wait_, [&](cudaStream_t stream) {
    void* p = x.data_ptr("broadcast");
    TESSERA_NCCL_CHECK(
        ncclBroadcast(p, p, size_t(x.numel()), nccl_type(x.dtype()), root, comm, stream));
  });
}

// NCCL has no tags: between two ranks, sends and receives match in the order they are issued.
// Each transfer is its own group, so a rank that sends to and receives from the same peer must
// issue the two in the opposite order to the peer's (or the streams wait on each other).
std::shared_ptr<Work> NcclCommunicator::do_send(const Tensor& x, int dst, int tag) {
  ncclComm_t comm = comm_.get();
  return launch("send", describe_call(str_cat("send to ", dst).c_str(), x), {x}, wait_,
                [&](cudaStream_t stream) {
                  TESSERA_NCCL_CHECK(ncclGroupStart());
                  TESSERA_NCCL_CHECK(ncclSend(x.data_ptr("send"), size_t(x.numel()),
                                              nccl_type(x.dtype()), dst, comm, stream));
                  TESSERA_NCCL_CHECK(ncclGroupEnd());
                });
}

std::shared_ptr<Work> NcclCommunicator::do_recv(const Tensor& x, int src, int tag) {
  ncclComm_t comm = comm_.get();
  return launch("recv", describe_call(str_cat("recv from ", src).c_str(), x), {x}, wait_,
                [&](cudaStream_t stream) {
                  TESSERA_NCCL_CHECK(ncclGroupStart());
                  TESSERA_NCCL_CHECK(ncclRecv(x.data_ptr("recv"), size_t(x.numel()),
                                              nccl_type(x.dtype()), src, comm, stream));
                  TESSERA_NCCL_CHECK(ncclGroupEnd());
                });
}

}  // namespace tessera::parallel
