#pragma once
// The tensor-parallel group of an inference command (`generate --tp`, `serve --tp`): every
// process the MPI launcher started is one rank of it, and there is no other parallel axis.

#include <functional>
#include <memory>
#include <string>

#include "tessera/parallel/comm/communicator.h"
#include "tessera/parallel/tp/tensor_parallel.h"

namespace tessera::cli {

// MPI's world when an MPI launcher started the program (main() then initialised MPI), else null.
std::shared_ptr<parallel::Communicator> mpi_world();

// Throws unless exactly `tp` processes run (naming `command` and how to start it).
void require_tp_world(int tp, const std::string& command);

// The group for --tp: null for --tp 1 in one process; otherwise every process, which must be
// exactly --tp of them. Throws naming `command` and how to start it otherwise.
std::shared_ptr<parallel::tp::TensorParallel> make_tp_group(int tp, const std::string& command);

// Runs body(rank) on this process's rank of the MPI world (0 without one). Every rank checks
// the same flags and files, so a refusal is the same on every rank: rank 0 reports it (the
// error propagates to main's one line), the others only fail (exit code 1).
void run_reporting_on_rank_zero(const std::function<void(int rank)>& body);

}  // namespace tessera::cli
