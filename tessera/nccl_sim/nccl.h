#pragma once
// The simulated NCCL: exactly the subset of NCCL's API (nccl.h, 2.19 and later) that Tessera's
// NCCL communicator calls, carried over MPI between the ranks, for builds configured with
// TESSERA_NCCL=simulated. Each rank is one process with one simulated CUDA device
// (tessera::cuda_simulated); a collective is queued on the simulator's stream it was given and
// runs when that stream runs (at once, or later in deferred-stream mode), so the communicator's
// streams, events and groups are exercised as on a GPU. Real NCCL is exercised only on a GPU.
//
// What it does as NCCL does: sends and receives between two ranks match in the order they
// are issued; the operations of one group run concurrently and the group completes when all
// have met their peers'; a communicator's operations run in the order of its stream.
// What it adds: every collective first compares its call (operation, count, type, root) across
// the ranks and throws one line naming both ranks' calls when they differ, where NCCL would
// hang or corrupt memory; a receive compares the byte count its sender sent. A rank that waits
// longer than TESSERA_NCCL_SIM_TIMEOUT seconds (default 600) for its peers prints the
// operation and aborts the job.
// What it does not do: ncclCommInitRank creates communicators over MPI's whole world only
// (sub-groups come from ncclCommSplit), and there is one device per rank.
//
// The functions are C++ functions in tessera::nccl_sim brought into the global namespace, so
// they never clash with a real libnccl's C symbols.

#include <cstddef>
#include <cstdint>

struct CUstream_st;
using cudaStream_t = CUstream_st*;  // the simulator's stream type (tessera/cuda/sim/device_api.h)
struct ncclComm;                    // defined in nccl_sim_comm.h
using ncclComm_t = ncclComm*;

namespace tessera::nccl_sim {

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};

enum ncclDataType_t {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
};

enum ncclRedOp_t { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };

inline constexpr int NCCL_UNIQUE_ID_BYTES = 128;
struct ncclUniqueId {
  char internal[NCCL_UNIQUE_ID_BYTES];
};

// Accepted and ignored (ncclCommSplit passes nullptr).
struct ncclConfig_t {
  int blocking = 1;
};

inline constexpr int NCCL_SPLIT_NOCOLOR = -1;

const char* ncclGetErrorString(ncclResult_t result);
// The last error's message on this rank (the communicator is ignored, as NCCL may).
const char* ncclGetLastError(ncclComm_t comm);

ncclResult_t ncclGetUniqueId(ncclUniqueId* id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();

}  // namespace tessera::nccl_sim

using namespace tessera::nccl_sim;  // NOLINT: nccl.h's names are global
