#include "cli/tp_group.h"

#include "cli/commands.h"
#include "tessera/core/error.h"
#include "tessera/parallel/mesh.h"

#if TESSERA_HAS_MPI
#include "tessera/parallel/comm/mpi_communicator.h"
#endif

namespace tessera::cli {

std::shared_ptr<parallel::Communicator> mpi_world() {
#if TESSERA_HAS_MPI
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized != 0) return parallel::MpiCommunicator::world();
#endif
  return nullptr;
}

void require_tp_world(int tp, const std::string& command) {
  TESSERA_CHECK(tp >= 1, command, ": --tp must be at least 1, got ", tp);
  const std::shared_ptr<parallel::Communicator> mpi = mpi_world();
  const int world = mpi ? mpi->size() : 1;
  TESSERA_CHECK(world == tp, command, ": --tp ", tp, " needs ", tp,
                tp == 1 ? " process" : " processes", " but ", world, world == 1 ? " is" : " are",
                " running; start it as mpiexec -n ", tp, " tessera ", command, " --tp ", tp,
                " ...");
}

std::shared_ptr<parallel::tp::TensorParallel> make_tp_group(int tp, const std::string& command) {
  require_tp_world(tp, command);
  if (tp == 1) return nullptr;
  const std::shared_ptr<parallel::Communicator> mpi = mpi_world();
  auto mesh = std::make_shared<parallel::DeviceMesh>(mpi, parallel::MeshShape{1, 1, tp});
  return parallel::tp::TensorParallel::from_mesh(mesh, false);
}

void run_reporting_on_rank_zero(const std::function<void(int rank)>& body) {
  const std::shared_ptr<parallel::Communicator> mpi = mpi_world();
  const int rank = mpi ? mpi->rank() : 0;
  try {
    body(rank);
  } catch (const Error&) {
    if (rank == 0) throw;
    exit_code() = 1;
  }
}

}  // namespace tessera::cli
