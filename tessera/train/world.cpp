#include "tessera/train/world.h"

#include <cstdlib>
#include <string>

#include "tessera/core/error.h"
#include "tessera/train/detail/device.h"

#include "tessera/parallel/comm/local_communicator.h"
#if TESSERA_HAS_MPI
#include <mpi.h>

#include "tessera/parallel/comm/mpi_communicator.h"
#endif
#if TESSERA_HAS_NCCL
#include "tessera/cuda/stream_order.h"
#include "tessera/parallel/comm/detail/nccl_communicator.h"
#endif

namespace tessera::train {

std::shared_ptr<parallel::Communicator> default_world(Device device,
                                                      parallel::CommOptions options) {
#if TESSERA_HAS_MPI
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    auto world = parallel::MpiCommunicator::world(options);
    if (world->size() > 1) {
      if (device.is_cpu()) return world;
#if TESSERA_HAS_NCCL
      // Real NCCL cannot carry the simulator's memory, nor the simulated NCCL a GPU's. The
      // communicator refuses it too; here it is the run's one line and exit status 2.
      const bool simulated_nccl = parallel::NcclCommunicator::simulated();
      const bool simulated_device = cuda::stream_order().simulated();
      if (simulated_device != simulated_nccl)
        throw DeviceUnavailable(str_cat(
            "tessera train: ", world->size(), " ranks on ",
            simulated_device ? "simulated GPUs (--device cuda-sim)" : "GPUs (--device cuda)",
            " need a build whose NCCL is ", simulated_device ? "simulated" : "real",
            "; this one was configured with TESSERA_NCCL=", simulated_nccl ? "simulated" : "real",
            " (reconfigure with -DTESSERA_NCCL=", simulated_device ? "simulated" : "real", ")"));
      return parallel::NcclCommunicator::create(MPI_COMM_WORLD, "world", world->options());
#else
      throw DeviceUnavailable(str_cat(
          "tessera train: ", world->size(), " ranks on ", device.to_string(),
          ": CUDA tensors travel over NCCL, and this build has no NCCL communicator ",
          "(configure with -DTESSERA_NCCL=real on GPUs, or simulated for simulated devices)"));
#endif
    }
  }
#endif
  return std::make_shared<parallel::LocalCommunicator>("world", options);
}

bool world_carries(const parallel::Communicator& world, Device device) {
  if (world.size() == 1 || device.is_cpu()) return true;
#if TESSERA_HAS_NCCL
  return dynamic_cast<const parallel::NcclCommunicator*>(&world) != nullptr;
#else
  return false;
#endif
}

int world_rank() {
#if TESSERA_HAS_MPI
  int initialized = 0, finalized = 0, rank = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
#else
  return 0;
#endif
}

int local_rank() {
  for (const char* var : {"MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    if (const char* v = std::getenv(var)) {
      try {
        return std::max(0, std::stoi(v));
      } catch (const std::exception&) {
      }
    }
  }
  return 0;
}

}  // namespace tessera::train
