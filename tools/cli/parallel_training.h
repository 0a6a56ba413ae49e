#pragma once
// `mpiexec -n N tessera train --dp D --tp T --pp P ...`: the training loop over the parallel
// engine (tessera/parallel/engine/parallel_trainer.h), with the single-process trainer's data,
// learning-rate schedule, clipping, logging and checkpoints.
//
// Every rank resolves the same options, reads the same files and runs the same deterministic
// loader, so every rank knows the global batch of each step (grad_accum loader batches, stacked)
// and the engine slices it; the losses are those of one process on that batch. A layout that
// does not fit is found on every rank before any collective and raised as LayoutError (one
// line, exit 2, no rank left waiting). Only rank 0 prints and writes metrics.jsonl.
//
// Checkpoints: rank 0 writes the gathered model and AdamW state in the single-process format
// (so generate, ckpt and a single-process resume read it), with the layout in state.json.
// Resuming restores both under any layout, whichever layout (or one process) wrote them.
//
// Validation (--val-data) runs as in one process, at the same steps over the same batches:
// each batch's loss is ParallelTrainer::evaluate's forward-only pass, each --batch-size batch
// split over dp (so dp must divide --batch-size).

#include <atomic>
#include <iosfwd>

#include "cli/train_options.h"
#include "cli/trainer.h"
#include "tessera/core/error.h"

namespace tessera::cli {

// The one line "tessera train: <reason>" that rank 0 prints before every rank exits with
// status 2: a layout that does not fit the model, the batch or the number of processes.
class LayoutError : public Error {
 public:
  using Error::Error;
};

// The processes of the MPI job: 1 when no MPI launcher started this one.
int mpi_world_size();
// This process's rank in the MPI job: 0 when no MPI launcher started it.
int mpi_world_rank();

// Trains under o's layout on the MPI world. `stop` is polled after every step; every rank
// agrees on it before acting. Collective over the world.
TrainResult run_parallel_training(const TrainOptions& o, std::ostream& out,
                                  const std::atomic<bool>& stop);

}  // namespace tessera::cli
