// The simulated NCCL's operations. Each is queued on the simulator's stream it was given
// (tessera/cuda/sim/streams.h) and, when the stream runs it, carried over MPI:
//
//   collectives  the ranks first all-gather their calls (operation, count, type, reduction,
//                root) and refuse a mismatch in one line; then all-gather (all-reduce,
//                all-gather), all-to-all (reduce-scatter) or broadcast the bytes. A reduction
//                runs on every rank over the ranks' inputs in rank order (f32 accumulation for
//                16-bit floats, one rounding), so every rank holds the same bits.
//   groups       the sends and receives between ncclGroupStart and ncclGroupEnd (or one alone)
//                run together: each pair first swaps a header (bytes, type) both ways, so both
//                ranks refuse a mismatch, then the data; the group completes when all have.
//
// The MPI traffic is that of a gather of every rank's buffer: fine for the small models of the
// tests, where the simulated kernels cost far more.

#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/core/half.h"
#include "tessera/cuda/sim/streams.h"
#include "tessera/nccl_sim/nccl_sim_comm.h"

namespace tessera::nccl_sim {

namespace {

enum class Kind : int32_t { all_reduce, reduce_scatter, all_gather, broadcast };
const char* kind_name(Kind kind) {
  static const char* names[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather",
                                "ncclBroadcast"};
  return names[int(kind)];
}
const char* op_name(int32_t op) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op <= ncclAvg ? names[op] : "?";
}

// What every rank's call must agree on.
struct Call {
  int32_t kind = 0;
  int32_t type = 0;
  int64_t count = 0;  // the per-rank count NCCL's signature takes
  int32_t op = -1;    // reductions only
  int32_t root = -1;  // broadcast only
  bool operator==(const Call&) const = default;
};

std::string describe(const Call& c) {
  std::string s =
      str_cat(kind_name(Kind(c.kind)), " of ", c.count, " ", type_name(ncclDataType_t(c.type)));
  if (c.op >= 0) s += str_cat(" (", op_name(c.op), ")");
  if (c.root >= 0) s += str_cat(" from root ", c.root);
  return s;
}

constexpr int kHeaderTag = 1, kDataTag = 2, kAckTag = 3;

int mpi_bytes(size_t bytes, const char* what) {
  TESSERA_CHECK(bytes <= size_t(std::numeric_limits<int>::max()), "simulated NCCL: ", what, " of ",
                bytes, " bytes: at most 2 GiB per call");
  return int(bytes);
}

// One element of `parts` as the accumulation type A (16-bit floats widen to float exactly).
template <class T, class A>
A load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>)
    return A(float(v));
  else
    return A(v);
}

// `parts` holds n arrays of `count` T; `out` gets their reduction, accumulated in A.
template <class T, class A>
void reduce(const char* parts, int n, size_t count, ncclRedOp_t op, void* out) {
  for (size_t i = 0; i < count; ++i) {
    A acc = load<T, A>(parts + i * sizeof(T));
    for (int r = 1; r < n; ++r) {
      const A v = load<T, A>(parts + (size_t(r) * count + i) * sizeof(T));
      switch (op) {
        case ncclSum:
        case ncclAvg:
          acc = A(acc + v);
          break;
        case ncclProd:
          acc = A(acc * v);
          break;
        case ncclMax:
          acc = v > acc ? v : acc;
          break;
        case ncclMin:
          acc = v < acc ? v : acc;
          break;
      }
    }
    if (op == ncclAvg) acc = A(acc / A(n));
    const T result = T(acc);
    std::memcpy(static_cast<char*>(out) + i * sizeof(T), &result, sizeof(T));
  }
}

void reduce_typed(ncclDataType_t type, const char* parts, int n, size_t count, ncclRedOp_t op,
                  void* out) {
  switch (type) {
    case ncclFloat32:
      return reduce<float, float>(parts, n, count, op, out);
    case ncclFloat64:
      return reduce<double, double>(parts, n, count, op, out);
    case ncclBfloat16:
      return reduce<BFloat16, float>(parts, n, count, op, out);
    case ncclFloat16:
      return reduce<Half, float>(parts, n, count, op, out);
    case ncclInt32:
      return reduce<int32_t, int32_t>(parts, n, count, op, out);
    case ncclInt64:
      return reduce<int64_t, int64_t>(parts, n, count, op, out);
    default:
      detail::throw_error("simulated NCCL: no reduction over ", type_name(type));
  }
}

bool reducible(ncclDataType_t type, ncclRedOp_t op) {
  const bool floating =
      type == ncclFloat32 || type == ncclFloat64 || type == ncclBfloat16 || type == ncclFloat16;
  const bool integer = type == ncclInt32 || type == ncclInt64;
  return (floating || (integer && op != ncclAvg)) && op >= ncclSum && op <= ncclAvg;
}

// All ranks' calls are the same one, or every rank throws naming a pair that differs.
void check_calls(const ncclComm& comm, const Call& mine, uint64_t sequence) {
  std::vector<Call> calls(size_t(comm.size));
  std::vector<MPI_Request> requests(1);
  MPI_Iallgather(&mine, int(sizeof(Call)), MPI_BYTE, calls.data(), int(sizeof(Call)), MPI_BYTE,
                 comm.data, &requests[0]);
  wait_all(requests, comm, str_cat(describe(mine), " (collective ", sequence, ")"));
  for (int r = 0; r < comm.size; ++r)
    if (!(calls[size_t(r)] == mine))
      fail_on_stream(str_cat("simulated NCCL: collective ", sequence, " of a communicator of ",
                             comm.size, " ranks does not match: rank ", comm.rank, " calls ",
                             describe(mine), " but rank ", r, " calls ",
                             describe(calls[size_t(r)])));
}

void run_collective(ncclComm* comm, Call call, uint64_t sequence, const void* send, void* recv) {
  check_calls(*comm, call, sequence);
  const int n = comm->size;
  const size_t elem = type_bytes(ncclDataType_t(call.type));
  const size_t bytes = size_t(call.count) * elem;  // per rank
  const std::string what = str_cat(describe(call), " (collective ", sequence, ")");
  const int mpi_count = mpi_bytes(bytes, kind_name(Kind(call.kind)));
  std::vector<MPI_Request> requests(1);
  switch (Kind(call.kind)) {
    case Kind::all_reduce: {
      std::vector<char> parts(bytes * size_t(n));
      MPI_Iallgather(send, mpi_count, MPI_BYTE, parts.data(), mpi_count, MPI_BYTE, comm->data,
                     &requests[0]);
      wait_all(requests, *comm, what);
      reduce_typed(ncclDataType_t(call.type), parts.data(), n, size_t(call.count),
                   ncclRedOp_t(call.op), recv);
      break;
    }
    case Kind::reduce_scatter: {
      // Rank r receives the r-th chunk of every rank's input.
      std::vector<char> parts(bytes * size_t(n));
      MPI_Ialltoall(send, mpi_count, MPI_BYTE, parts.data(), mpi_count, MPI_BYTE, comm->data,
                    &requests[0]);
      wait_all(requests, *comm, what);
      reduce_typed(ncclDataType_t(call.type), parts.data(), n, size_t(call.count),
                   ncclRedOp_t(call.op), recv);
      break;
    }
    case Kind::all_gather: {
      // The input may be this rank's chunk of the output (in place): copy it out first.
      std::vector<char> mine(static_cast<const char*>(send),
                             static_cast<const char*>(send) + bytes);
      MPI_Iallgather(mine.data(), mpi_count, MPI_BYTE, recv, mpi_count, MPI_BYTE, comm->data,
                     &requests[0]);
      wait_all(requests, *comm, what);
      break;
    }
    case Kind::broadcast: {
      if (comm->rank == call.root && send != recv) std::memmove(recv, send, bytes);
      MPI_Ibcast(recv, mpi_count, MPI_BYTE, call.root, comm->data, &requests[0]);
      wait_all(requests, *comm, what);
      break;
    }
  }
}

// ---- groups ----------------------------------------------------------------------------------

struct Transfer {
  bool send = false;
  void* buffer = nullptr;
  size_t count = 0;
  ncclDataType_t type = ncclFloat32;
  int peer = 0;
  ncclComm* comm = nullptr;
  cudaStream_t stream = nullptr;
};

struct GroupState {
  int depth = 0;
  std::vector<Transfer> transfers;
};
thread_local GroupState g_group;

struct Header {
  int64_t bytes = 0;
  int64_t type = 0;
};

void run_group(const std::vector<Transfer>& group) {
  const ncclComm& comm = *group.front().comm;
  // Round 1: each side sends its header to the other and receives the other's.
  std::vector<Header> mine(group.size()), theirs(group.size());
  std::vector<MPI_Request> requests;
  for (size_t i = 0; i < group.size(); ++i) {
    const Transfer& t = group[i];
    mine[i] = {int64_t(t.count * type_bytes(t.type)), int64_t(t.type)};
    requests.emplace_back();
    MPI_Isend(&mine[i], int(sizeof(Header)), MPI_BYTE, t.peer, t.send ? kHeaderTag : kAckTag,
              comm.data, &requests.back());
    requests.emplace_back();
    MPI_Irecv(&theirs[i], int(sizeof(Header)), MPI_BYTE, t.peer, t.send ? kAckTag : kHeaderTag,
              comm.data, &requests.back());
  }
  const std::string what = str_cat("a group of ", group.size(), " send/recv");
  wait_all(requests, comm, what);
  for (size_t i = 0; i < group.size(); ++i) {
    const Transfer& t = group[i];
    if (mine[i].bytes != theirs[i].bytes || mine[i].type != theirs[i].type)
      fail_on_stream(str_cat("simulated NCCL: ", t.send ? "ncclSend" : "ncclRecv", " on ",
                             describe_rank(comm), " ", t.send ? "to" : "from", " rank ", t.peer,
                             " does not match its peer's: ", t.count, " ", type_name(t.type),
                             " here, ", theirs[i].bytes, " bytes of ",
                             type_name(ncclDataType_t(theirs[i].type)), " there"));
  }
  // Round 2: the data.
  for (const Transfer& t : group) {
    const int bytes = mpi_bytes(t.count * type_bytes(t.type), t.send ? "ncclSend" : "ncclRecv");
    requests.emplace_back();
    if (t.send)
      MPI_Isend(t.buffer, bytes, MPI_BYTE, t.peer, kDataTag, comm.data, &requests.back());
    else
      MPI_Irecv(t.buffer, bytes, MPI_BYTE, t.peer, kDataTag, comm.data, &requests.back());
  }
  wait_all(requests, comm, what);
}

ncclResult_t add_transfer(Transfer t) {
  const char* name = t.send ? "ncclSend" : "ncclRecv";
  if (t.comm == nullptr) return record_error(ncclInvalidArgument, str_cat(name, ": comm is null"));
  if (type_bytes(t.type) == 0)
    return record_error(ncclInvalidArgument, str_cat(name, ": unknown type ", int(t.type)));
  if (t.peer < 0 || t.peer >= t.comm->size)
    return record_error(ncclInvalidArgument, str_cat(name, " on ", describe_rank(*t.comm),
                                                     ": peer ", t.peer, " is not a rank"));
  if (t.buffer == nullptr && t.count > 0)
    return record_error(ncclInvalidArgument, str_cat(name, ": buffer is null"));
  const bool alone = g_group.depth == 0;
  if (alone) ncclGroupStart();
  g_group.transfers.push_back(t);
  return alone ? ncclGroupEnd() : ncclSuccess;
}

ncclResult_t queue_collective(Kind kind, const void* send, void* recv, size_t count,
                              ncclDataType_t type, int op, int root, ncclComm_t comm,
                              cudaStream_t stream) {
  const char* name = kind_name(kind);
  if (comm == nullptr) return record_error(ncclInvalidArgument, str_cat(name, ": comm is null"));
  if (g_group.depth > 0)
    return record_error(ncclInvalidUsage,
                        str_cat(name, ": the simulated NCCL groups sends and receives only"));
  if (type_bytes(type) == 0)
    return record_error(ncclInvalidArgument, str_cat(name, ": unknown type ", int(type)));
  if (op >= 0 && !reducible(type, ncclRedOp_t(op)))
    return record_error(ncclInvalidArgument,
                        str_cat(name, ": no ", op_name(op), " over ", type_name(type)));
  if (root >= comm->size || (kind == Kind::broadcast && root < 0))
    return record_error(ncclInvalidArgument,
                        str_cat(name, ": root ", root, " is not a rank of ", comm->size));
  if (count > 0 && (send == nullptr || recv == nullptr))
    return record_error(ncclInvalidArgument, str_cat(name, ": a buffer is null"));
  Call call{int32_t(kind), int32_t(type), int64_t(count), int32_t(op), int32_t(root)};
  const uint64_t sequence = ++comm->collectives;
  comm->streams.insert(stream);
  cuda::sim::submit(stream, [=] { run_collective(comm, call, sequence, send, recv); });
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  return queue_collective(Kind::all_reduce, sendbuff, recvbuff, count, datatype, op, -1, comm,
                          stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream) {
  return queue_collective(Kind::reduce_scatter, sendbuff, recvbuff, recvcount, datatype, op, -1,
                          comm, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return queue_collective(Kind::all_gather, sendbuff, recvbuff, sendcount, datatype, -1, -1, comm,
                          stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  return queue_collective(Kind::broadcast, sendbuff, recvbuff, count, datatype, -1, root, comm,
                          stream);
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return add_transfer({true, const_cast<void*>(sendbuff), count, datatype, peer, comm, stream});
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return add_transfer({false, recvbuff, count, datatype, peer, comm, stream});
}

ncclResult_t ncclGroupStart() {
  ++g_group.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (g_group.depth == 0)
    return record_error(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--g_group.depth > 0) return ncclSuccess;
  std::vector<Transfer> group = std::move(g_group.transfers);
  g_group.transfers.clear();
  if (group.empty()) return ncclSuccess;
  for (const Transfer& t : group)
    if (t.comm != group.front().comm || t.stream != group.front().stream)
      return record_error(ncclInvalidUsage,
                          "ncclGroupEnd: the simulated NCCL runs a group on one communicator "
                          "and one stream");
  const cudaStream_t stream = group.front().stream;
  group.front().comm->streams.insert(stream);
  cuda::sim::submit(stream, [group = std::move(group)] { run_group(group); });
  return ncclSuccess;
}

}  // namespace tessera::nccl_sim
