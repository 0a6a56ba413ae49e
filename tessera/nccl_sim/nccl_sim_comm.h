#pragma once
// The simulated NCCL's communicator (nccl.h declares it opaque) and what its operations share.

#include <mpi.h>

#include <set>
#include <string>
#include <vector>

#include "tessera/nccl_sim/nccl.h"

struct ncclComm {
  // Operations queued on streams run on `data`, in stream order; calls made by the host at
  // once (ncclCommSplit) use `control`, in program order. Keeping them apart keeps MPI's
  // matching of the two sequences independent when deferred streams run later than the host.
  MPI_Comm data = MPI_COMM_NULL;
  MPI_Comm control = MPI_COMM_NULL;
  int rank = 0, size = 1;
  uint64_t collectives = 0;        // issued so far: the sequence number in mismatch messages
  std::set<cudaStream_t> streams;  // used so far: ncclCommDestroy runs them first
};

namespace tessera::nccl_sim {

// Records `message` as this rank's last error (ncclGetLastError) and returns `result`.
ncclResult_t record_error(ncclResult_t result, std::string message);
// Throws tessera::Error with `message` (an operation found on its stream that the ranks'
// calls do not match): the host call that ran the stream reports it.
[[noreturn]] void fail_on_stream(const std::string& message);

// Waits for `requests`, polling (spinning briefly, then sleeping up to 100 us) so that an
// oversubscribed rank yields its core; past TESSERA_NCCL_SIM_TIMEOUT seconds prints `what`
// and aborts the job.
void wait_all(std::vector<MPI_Request>& requests, const ncclComm& comm, const std::string& what);

// "rank 1 of 4"
std::string describe_rank(const ncclComm& comm);
size_t type_bytes(ncclDataType_t type);
const char* type_name(ncclDataType_t type);

}  // namespace tessera::nccl_sim
