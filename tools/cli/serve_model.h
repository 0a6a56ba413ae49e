#pragma once
// What every rank of `tessera serve` builds from the same flags: the model (under --tp, this
// rank's shard) and the engine's options. Rank 0 leads: it runs the HTTP server and the
// scheduler (ServeApp) and sends each iteration's plan to the other ranks, which follow
// (follow_serve) until it says stop (tessera/serve/iteration_plan.h).
//
//   mpiexec -n 2 tessera serve --model runs/default --tp 2 --port 8000

#include <memory>

#include "cli/serve_app.h"
#include "tessera/parallel/tp/tensor_parallel.h"
#include "tessera/serve/engine.h"
#include "tessera/train/detail/model_source.h"

namespace tessera::cli {

struct ServedModel {
  std::shared_ptr<parallel::tp::TensorParallel> tp;  // null for --tp 1
  std::unique_ptr<train::LoadedModel> loaded;
  serve::EngineOptions options;
  // Under --tp: rank 0's channel to the others (broadcasts over the group).
  std::shared_ptr<serve::PlanChannel> followers;
};

// Throws naming the flag unless every flag that needs no model is in range and --tp and
// --device can go together (tensor-parallel serving runs on the CPU). Every rank checks, before
// anything listens or loads.
void check_serve_flags(const ServeFlags& f);

// Every rank, collectively under --tp: the group, the model on --device, the engine options.
ServedModel load_served_model(const ServeFlags& f);

// A rank other than 0 under --tp: loads its shard and runs the leader's iterations until the
// leader stops. Stop signals are left to the leader (mpiexec forwards them to every rank).
void follow_serve(const ServeFlags& f);

}  // namespace tessera::cli
