#pragma once
// The CUDA device an NCCL test rank uses. A build whose NCCL is simulated gives every rank its
// own simulated device; one on real NCCL takes the GPU of the rank's index among the ranks on
// its node (NCCL allows one rank per GPU). Returns why the rank cannot run, or "".

#include <mpi.h>

#include <string>

#include "tessera/core/error.h"
#include "tessera/cuda/cuda.h"

namespace tessera::parallel::testing {

inline std::string open_nccl_device() {
#if defined(TESSERA_NCCL_SIMULATED)
  cuda::use_simulated_device();
  return "";
#else
  const int devices = cuda::device_count();
  if (devices == 0) return "no CUDA device is visible; the device check runs these tests";
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  int local = 0, local_size = 1;
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  if (local_size > devices)
    return str_cat(local_size, " ranks on this node but ", devices,
                   " GPU(s): NCCL allows one rank per GPU");
  cuda::init_device(local);
  return "";
#endif
}

}  // namespace tessera::parallel::testing
