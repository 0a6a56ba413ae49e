#pragma once
// The training loop behind `tessera train`: builds (or resumes) the model, optimizer and data
// loaders from TrainOptions, then steps, logs, evaluates and checkpoints.
//
// Each optimizer step: the model's dropout step is set, the schedule's lr applied, grad_accum
// micro-batches run forward and backward (each loss scaled by 1/grad_accum), the global
// gradient norm is clipped inside the fused update, and one line is printed and appended to
// <run_dir>/metrics.jsonl. A checkpoint holds the model, the optimizer state, the loader
// position, the step and the resolved options, so a resumed run repeats exactly the losses an
// uninterrupted one would have produced (same thread count: GEMM blocking depends on it).
//
// --precision bf16/fp16 adds a model in that dtype for forward and backward; the fp32 model
// holds the master weights (optimizer, checkpoints) and nn::MixedPrecision moves gradients and
// weights between the two, with fp16's loss scale in the checkpoint. --device cuda puts both
// on cuda:0 (train_device.h).
//
// With a parallel layout (--dp/--tp/--pp above 1), or under mpiexec with more than one
// process, run() hands over to the parallel loop (parallel_training.h).

#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

#include "cli/train_options.h"

namespace tessera::cli {

struct TrainResult {
  int64_t start_step = 0;  // where this invocation began (0, or the resumed checkpoint)
  int64_t final_step = 0;
  double final_loss = 0;
  std::optional<double> final_val_loss;
  bool interrupted = false;
  std::string checkpoint;  // the last checkpoint written
};

class Trainer {
 public:
  Trainer(TrainOptions options, std::ostream& out);
  TrainResult run();

  // Asks every running loop to stop after its current step, checkpoint and return. Safe to
  // call from a signal handler.
  static void request_stop() { stop_requested_.store(true); }
  static void clear_stop() { stop_requested_.store(false); }

 private:
  TrainOptions options_;
  std::ostream& out_;
  static std::atomic<bool> stop_requested_;
};

}  // namespace tessera::cli
