#include "tessera/train/world.h"

#include <cstdlib>
#include <string>

#include "tessera/parallel/comm/local_communicator.h"
#if TESSERA_HAS_MPI
#include <mpi.h>

#include "tessera/parallel/comm/mpi_communicator.h"
#endif

namespace tessera::train {

std::shared_ptr<parallel::Communicator> default_world() {
#if TESSERA_HAS_MPI
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    auto world = parallel::MpiCommunicator::world();
    if (world->size() > 1) return world;
  }
#endif
  return std::make_shared<parallel::LocalCommunicator>("world");
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
