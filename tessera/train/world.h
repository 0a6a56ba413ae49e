#pragma once
// The ranks a training run spans. A program started by an MPI launcher (mpiexec, srun) that has
// initialised MPI (parallel::MpiSession) trains over MPI's world; any other trains alone. A
// world of one rank is always a LocalCommunicator, whatever started the process: its
// collectives are copies on any device, so `mpiexec -n 1` and a plain run are the same run.

#include <memory>

#include "tessera/core/device.h"
#include "tessera/parallel/comm/communicator.h"

namespace tessera::train {

// The world of a run on `device`: one local rank when MPI is not initialised or has one rank;
// else MPI's world for CPU tensors, and for CUDA tensors the NCCL communicator over it (real
// NCCL on GPUs, the simulated one on simulated devices, whichever the build has). A build
// without an NCCL communicator refuses CUDA under several ranks in one line.
// options: the communicator's (its timeout, wait mode); the NCCL world takes the same.
std::shared_ptr<parallel::Communicator> default_world(Device device = Device::cpu(),
                                                      parallel::CommOptions options = {});

// Whether `world` can carry `device`'s tensors between its ranks.
bool world_carries(const parallel::Communicator& world, Device device);

// This process's rank in MPI's world (0 when MPI is not initialised): which rank reports
// errors before a world exists.
int world_rank();

// This process's rank among the processes on its node (the launcher's local rank: MPICH's
// MPI_LOCALRANKID, Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, Slurm's SLURM_LOCALID), 0 when no
// launcher set one. `--device cuda` takes GPU local_rank mod the visible GPUs.
int local_rank();

}  // namespace tessera::train
