#pragma once
// Tessera's parallel layer in one include: what a research codebase uses to split a GPT over
// ranks, or to run a layout in one process to debug it.
//
//   communicators   Communicator (the interface), MpiSession and MpiCommunicator (under an
//                   MPI launcher; TESSERA_HAS_MPI), LocalCommunicator (one rank),
//                   ThreadCommunicator and run_ranks (ranks as threads of one process)
//   the mesh        MeshShape (named axes) and DeviceMesh (a group per axis)
//   the strategies  tp::TensorParallel, pipeline schedules with their simulator and timeline,
//                   DataParallel with ZeRO 0-3
//   the engine      ParallelConfig and ParallelTrainer: a GPT with AdamW under any layout
//
// Everything else under tessera/parallel/ is internal (the detail/ folders, not installed).

#include "tessera/parallel/comm/communicator.h"
#include "tessera/parallel/comm/flight_diagnosis.h"
#include "tessera/parallel/comm/flight_recorder.h"
#include "tessera/parallel/comm/flight_watch.h"
#include "tessera/parallel/comm/local_communicator.h"
#include "tessera/parallel/comm/run_ranks.h"
#include "tessera/parallel/comm/thread_communicator.h"
#if TESSERA_HAS_MPI
#include "tessera/parallel/comm/mpi_communicator.h"
#endif
#include "tessera/parallel/data/data_parallel.h"
#include "tessera/parallel/engine/parallel_config.h"
#include "tessera/parallel/engine/parallel_trainer.h"
#include "tessera/parallel/mesh.h"
#include "tessera/parallel/pipeline/executor.h"
#include "tessera/parallel/pipeline/schedule.h"
#include "tessera/parallel/pipeline/simulator.h"
#include "tessera/parallel/pipeline/timeline_svg.h"
#include "tessera/parallel/step_trace.h"
#include "tessera/parallel/tp/tensor_parallel.h"
