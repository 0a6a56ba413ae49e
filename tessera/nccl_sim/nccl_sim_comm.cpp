// The simulated NCCL's communicators: creation over MPI's world, ncclCommSplit as
// MPI_Comm_split, queries, destruction after the streams that used them, and errors.

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

#include "tessera/core/error.h"
#include "tessera/cuda/sim/streams.h"
#include "tessera/nccl_sim/nccl_sim_comm.h"

namespace tessera::nccl_sim {

namespace {

thread_local std::string g_last_error;
constexpr char kIdMagic[] = "tessera-nccl-sim";

double timeout_seconds() {
  if (const char* env = std::getenv("TESSERA_NCCL_SIM_TIMEOUT")) {
    char* end = nullptr;
    const double t = std::strtod(env, &end);
    if (end != env && t > 0) return t;
  }
  return 600.0;
}

bool mpi_alive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

ncclComm* make_comm(MPI_Comm data) {
  auto* comm = new ncclComm();
  comm->data = data;  // MPI's default handler: a failed MPI call aborts the job, loudly
  MPI_Comm_dup(data, &comm->control);
  MPI_Comm_rank(data, &comm->rank);
  MPI_Comm_size(data, &comm->size);
  return comm;
}

void free_comm(ncclComm* comm, bool run_streams) {
  if (comm == nullptr) return;
  // As NCCL's ncclCommDestroy, the operations already queued complete first.
  if (run_streams)
    for (cudaStream_t stream : comm->streams) cuda::sim::drain(stream);
  if (mpi_alive()) {
    MPI_Comm_free(&comm->data);
    MPI_Comm_free(&comm->control);
  }
  delete comm;
}

}  // namespace

ncclResult_t record_error(ncclResult_t result, std::string message) {
  g_last_error = std::move(message);
  return result;
}

void fail_on_stream(const std::string& message) {
  g_last_error = message;
  detail::throw_error(message);
}

std::string describe_rank(const ncclComm& comm) {
  return str_cat("rank ", comm.rank, " of ", comm.size);
}

size_t type_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
  }
  return 0;
}

const char* type_name(ncclDataType_t type) {
  static const char* names[] = {"int8",   "uint8",   "int32",   "uint32",  "int64",
                                "uint64", "float16", "float32", "float64", "bfloat16"};
  return type >= 0 && type <= ncclBfloat16 ? names[type] : "unknown type";
}

void wait_all(std::vector<MPI_Request>& requests, const ncclComm& comm, const std::string& what) {
  if (requests.empty()) return;
  static const double timeout = timeout_seconds();
  const auto start = std::chrono::steady_clock::now();
  long sleep_ns = 1000;
  for (int spins = 0;; ++spins) {
    int done = 0;
    const int rc = MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    TESSERA_CHECK(rc == MPI_SUCCESS, "simulated NCCL: ", what, " on ", describe_rank(comm),
                  ": MPI failed with code ", rc);
    if (done) break;
    if (spins < 64) continue;
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeout) {
      std::fprintf(stderr,
                   "tessera: simulated NCCL: %s on %s waited %.0f s for its peers "
                   "(TESSERA_NCCL_SIM_TIMEOUT); aborting the job\n",
                   what.c_str(), describe_rank(comm).c_str(), waited);
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 124);
    }
    struct timespec ts {
      0, sleep_ns
    };
    nanosleep(&ts, nullptr);
    sleep_ns = std::min(sleep_ns * 2, 100000L);
  }
  requests.clear();
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}

const char* ncclGetLastError(ncclComm_t) {
  return g_last_error.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return record_error(ncclInvalidArgument, "ncclGetUniqueId: id is null");
  std::memset(id->internal, 0, sizeof(id->internal));
  std::memcpy(id->internal, kIdMagic, sizeof(kIdMagic));
  const uint64_t nonce = std::random_device{}();
  std::memcpy(id->internal + sizeof(kIdMagic), &nonce, sizeof(nonce));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (comm == nullptr) return record_error(ncclInvalidArgument, "ncclCommInitRank: comm is null");
  if (!mpi_alive())
    return record_error(ncclInvalidUsage,
                        "ncclCommInitRank: the simulated NCCL carries its operations over MPI, "
                        "which is not initialised");
  if (std::memcmp(id.internal, kIdMagic, sizeof(kIdMagic)) != 0)
    return record_error(ncclInvalidArgument,
                        "ncclCommInitRank: the unique id does not come from ncclGetUniqueId");
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (nranks != world_size || rank != world_rank)
    return record_error(
        ncclInvalidUsage,
        str_cat("ncclCommInitRank(nranks ", nranks, ", rank ", rank, "): the simulated NCCL ",
                "creates communicators over MPI's whole world only (", world_size,
                " ranks, this is rank ", world_rank, "); sub-groups come from ncclCommSplit"));
  MPI_Comm data;
  MPI_Comm_dup(MPI_COMM_WORLD, &data);
  // Every rank must hold the same id, as NCCL requires.
  std::vector<char> ids(size_t(world_size) * sizeof(id.internal));
  MPI_Allgather(id.internal, int(sizeof(id.internal)), MPI_BYTE, ids.data(),
                int(sizeof(id.internal)), MPI_BYTE, data);
  for (int r = 0; r < world_size; ++r)
    if (std::memcmp(ids.data() + size_t(r) * sizeof(id.internal), id.internal,
                    sizeof(id.internal)) != 0) {
      MPI_Comm_free(&data);
      return record_error(ncclInvalidUsage,
                          str_cat("ncclCommInitRank: rank ", r, " passed another unique id than ",
                                  "rank ", world_rank, " (broadcast rank 0's id to every rank)"));
    }
  *comm = make_comm(data);
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t*) {
  if (comm == nullptr || newcomm == nullptr)
    return record_error(ncclInvalidArgument, "ncclCommSplit: comm or newcomm is null");
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return record_error(ncclInvalidArgument,
                        str_cat("ncclCommSplit: color ", color, " is negative"));
  MPI_Comm child;
  MPI_Comm_split(comm->control, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &child);
  *newcomm = child == MPI_COMM_NULL ? nullptr : make_comm(child);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  free_comm(comm, /*run_streams=*/true);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  free_comm(comm, /*run_streams=*/false);
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr)
    return record_error(ncclInvalidArgument, "ncclCommGetAsyncError: null argument");
  *async_error = ncclSuccess;  // failures on a stream throw where the stream runs
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr)
    return record_error(ncclInvalidArgument, "ncclCommCount: null argument");
  *count = comm->size;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (comm == nullptr || device == nullptr)
    return record_error(ncclInvalidArgument, "ncclCommCuDevice: null argument");
  *device = 0;  // one simulated device per rank
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr)
    return record_error(ncclInvalidArgument, "ncclCommUserRank: null argument");
  *rank = comm->rank;
  return ncclSuccess;
}

}  // namespace tessera::nccl_sim
