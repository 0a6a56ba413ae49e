#pragma once
// StepEngine: what train::Trainer runs one optimizer step on. Two implementations:
//
//   LayoutEngine (layout_engine.h)  a GPT under any dp x tp x pp layout, ZeRO 0-3, every
//                                   pipeline schedule, sequence parallelism, bf16/fp16 over
//                                   fp32 masters: parallel::ParallelTrainer. One process is the
//                                   layout (1, 1, 1) of the same code.
//   ModuleEngine (module_engine.h)  any Module with the caller's loss and any nn::Optimizer,
//                                   under data parallelism with ZeRO 0 (gradients averaged over
//                                   the ranks); bf16/fp16 through nn::MixedPrecision.
//
// Both take this data-parallel rank's rows of the step's global batch (the loader reads nothing
// else), weight each micro-batch's mean loss by its share of the global count of targets that
// are not ignore_index, and report the mean loss over the global batch, the same on every rank.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/core/tensor.h"
#include "tessera/nn/io/sharded_checkpoint.h"
#include "tessera/nn/io/tensor_source.h"
#include "tessera/nn/module.h"
#include "tessera/nn/optim/loss_scaler.h"
#include "tessera/nn/optim/optimizer.h"
#include "tessera/parallel/engine/parallel_trainer.h"

namespace tessera::train {

struct EngineStep {
  double loss = 0;        // mean over the global batch's counted targets
  double grad_norm = 0;   // global, before clipping
  double lr = 0;          // the learning rate this step used
  double loss_scale = 1;  // fp16: the scale the backward ran with
  bool skipped = false;   // fp16 overflow: nothing was updated
  double seconds = 0;     // wall time on this rank
  double comm_seconds = 0;
  // The wall time by phase (each including the communication it blocked in).
  double forward_seconds = 0, backward_seconds = 0, optimizer_seconds = 0;
  int64_t comm_bytes = 0;  // what this rank sent over every group, as a ring sends it
  double bubble = 0;  // the pipeline's measured idle / busy (LayoutEngine, pp > 1)
  parallel::RankMemory memory;
};

// This rank's share of a sharded checkpoint: the pieces it alone writes (views of the live
// state, unchanged until the next update) and the optimizer's scalars.
struct OwnedState {
  std::vector<nn::ShardPiece> pieces;
  nlohmann::json optimizer_scalars;
};

// This rank's own state, enough to restore the same rank of the same layout with nothing else
// (a node-local checkpoint, nn/io/local_checkpoint.h): views of the live state.
struct LocalState {
  nn::StateDict tensors;
  nlohmann::json optimizer_scalars;
};

class StepEngine {
 public:
  virtual ~StepEngine() = default;

  // One optimizer step on this dp rank's rows: integer ids and targets [rows, T] on the CPU.
  // Collective over the run's world.
  virtual EngineStep step(const Tensor& inputs, const Tensor& targets) = 0;
  // The mean loss over the global batch of which these are this dp rank's rows (no update,
  // no dropout). Collective.
  virtual double evaluate(const Tensor& inputs, const Tensor& targets) = 0;

  // The single-process model state dict, on the CPU, on every rank; and its load into this
  // rank's part. Collective.
  virtual nn::StateDict gather_model() = 0;
  virtual void load_model(const nn::StateDict& full) = 0;
  // The same from single-process tensors read by range (an --init-from of Hugging Face Llama
  // weights). By default read whole and loaded as load_model; an engine whose ranks hold parts
  // reads only those. Collective.
  virtual void load_model_source(const std::shared_ptr<const nn::TensorSource>& source) {
    load_model(source->read_all());
  }
  // The optimizer state in the single-process format, on the CPU; and its load. Collective.
  virtual nn::OptimizerState gather_optimizer() = 0;
  virtual void load_optimizer(const nn::OptimizerState& full) = 0;
  // Resumes from an opened sharded set (nn/io/sharded_checkpoint.h), reading only what this
  // rank holds; with optimizer_scalars (the single-process optimizer's), the optimizer state
  // too. False: this engine takes the single-process state instead (load_model and
  // load_optimizer), and nothing was read. Collective.
  virtual bool load_checkpoint_set(const nn::ShardedSet& set,
                                   const nlohmann::json* optimizer_scalars) {
    (void)set;
    (void)optimizer_scalars;
    return false;
  }
  // Resumes from a single-process checkpoint opened by range (nn::open_checkpoint with
  // open_gathered), reading only what this rank holds; with optimizer and optimizer_scalars,
  // the optimizer state too. False: this engine takes the single-process state instead (the
  // files read whole), and nothing was read. Collective.
  virtual bool load_checkpoint_files(const nn::TensorSource& model,
                                     const nn::TensorSource* optimizer,
                                     const nlohmann::json* optimizer_scalars) {
    (void)model;
    (void)optimizer;
    (void)optimizer_scalars;
    return false;
  }
  // What this rank writes of a sharded checkpoint (nn/io/sharded_checkpoint.h): every element
  // of the single-process model and optimizer state is in exactly one rank's pieces. Local.
  virtual OwnedState owned_state() = 0;
  // The rank's own state and its restore into the same rank of the same layout (names and
  // shapes checked). Local.
  virtual LocalState local_state() = 0;
  virtual void load_local_state(const LocalState& state) = 0;
  // Called in every step before the update changes the weights or the optimizer state.
  virtual void set_before_update(std::function<void()> hook) = 0;
  // While set, steps add their spans to `trace` (parallel/step_trace.h). Returns whether this
  // engine traces its steps' insides; one that does not (the default) leaves the trainer to
  // draw the engine's step as one span.
  virtual bool set_trace(parallel::StepTrace* trace) {
    (void)trace;
    return false;
  }
  // Mixed precision's state (fp16's loss scaler), for checkpoints.
  virtual nlohmann::json precision_state() const = 0;
  virtual void load_precision_state(const nlohmann::json& state) = 0;
  virtual const nn::DynamicLossScaler* scaler() const = 0;

  // The step the next call to step() runs (its learning rate and dropout masks).
  virtual void set_step(int64_t step) = 0;
  virtual int dp_rank() const = 0;
  virtual int dp_size() const = 0;
  // One line for the startup banner.
  virtual std::string describe() const = 0;
  // The layout, for a checkpoint's state.json (empty for one process).
  virtual nlohmann::json layout_json() const = 0;
};

}  // namespace tessera::train
