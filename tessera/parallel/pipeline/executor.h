#pragma once
// The pipeline executor: runs this rank's action list of a schedule (schedule.h) over the
// pipeline group, against a PipelineStage that computes the rank's chunks.
//
// Each forward records autograd from a fresh leaf: the received activation (or, with every
// chunk on one rank, a detached handle on the previous chunk's output) with requires_grad set.
// The executor keeps that input and the chunk's output until the micro-batch's backward, which
// backpropagates the received output gradient (on the last model stage: loss_scale / m, so
// the accumulated parameter gradients are those of the mean loss over the whole batch) and
// sends the input's gradient back. Parameter gradients accumulate over the micro-batches in
// the order the schedule runs their backwards.
//
// An output's data is freed once its send completes (as Megatron-LM's deallocate_output_tensor
// does): the next stage holds the values, and backward needs only the output's graph, shape
// and dtype. Only when nothing else shares the buffer: a stage whose last op saved its output
// for backward (tanh, say), or that kept a view of it, keeps it whole. Under 1F1B pipeline
// rank r then holds one output whose send is pending where it held its p - r in flight; a
// freed output that something reads throws naming the read instead of returning stale values
// (storage.h).
//
// Sends are posted asynchronously and waited for at the end of the step; receives block (the
// rules the dry-run simulator checks schedules under). Time spent in compute actions is busy;
// the rest of the step (waiting for messages and the tied all-reduce) is the measured bubble.
// An error on one rank (a stage that throws) leaves its peers waiting on transfers until the
// communicator's timeout aborts the job, naming the group and the transfer.

#include <vector>

#include "tessera/core/device.h"
#include "tessera/core/shape.h"
#include "tessera/core/tensor.h"
#include "tessera/parallel/comm/communicator.h"
#include "tessera/parallel/pipeline/schedule.h"

namespace tessera::parallel {
class StepTrace;
}

namespace tessera::parallel {

// The shape and dtype of an activation to receive.
struct ActivationSpec {
  Shape shape;
  DType dtype = DType::f32;
  Device device = Device::cpu();
};

// The chunks of the model one rank computes (model stage chunk * p + rank, see schedule.h).
class PipelineStage {
 public:
  virtual ~PipelineStage() = default;
  // Runs `chunk` on micro-batch `micro`, recording autograd. `input` is the previous model
  // stage's output (a leaf requiring grad), or undefined on model stage 0, which reads
  // micro-batch `micro` itself. On the last model stage the result is the micro-batch's mean
  // loss (one element), which also reads its own targets; elsewhere it is the activation for
  // the next stage, whose input_spec must match it.
  virtual Tensor forward(int chunk, int micro, const Tensor& input) = 0;
  // The activation entering model stage `model_stage` (>= 1) for micro-batch `micro`, i.e.
  // the output of model stage - 1. Every rank must give the same answer for every stage (it
  // follows from the model's config and the micro-batch size): the receiver allocates its
  // buffer from it and the sender checks its output against it, so a stage returning the wrong
  // shape fails on the sending rank instead of delivering misread bytes.
  virtual ActivationSpec activation_spec(int model_stage, int micro) const = 0;
  // The copies of tied parameters whose gradients all_reduce_tied sums between the first and
  // last stage (tied_gradients.h); none by default.
  virtual std::vector<Tensor> tied_parameters() { return {}; }
  // Called before each backward; `last` marks the chunk's final backward of the step, after
  // which its parameter gradients are complete (where data parallelism can start reducing
  // them). Nothing by default.
  virtual void before_backward(int chunk, int micro, bool last) {}
};

struct PipelineOptions {
  // Scales every micro-batch's loss gradient (beside 1 / m): the mixed-precision loss scale.
  double loss_scale = 1.0;
  // The group all_reduce_tied sums over (DeviceMesh::embedding()); needed when this rank's
  // list has that action.
  Communicator* embedding = nullptr;
  // Where each forward and backward goes as a span when the step is traced (step_trace.h).
  StepTrace* trace = nullptr;
};

struct PipelineStepStats {
  double loss = 0;  // mean of the micro-batch losses; every rank of the group receives it
  // This rank: the step's wall time, the time in forwards and backwards, and the rest.
  double wall_seconds = 0, busy_seconds = 0, idle_seconds = 0;
  double forward_seconds = 0, backward_seconds = 0;  // busy_seconds split by action
  double bubble = 0;  // this rank: idle / busy
  // The group, as the simulator reports it: every rank idles until the slowest one finishes,
  // so (ranks * longest wall time - total busy) / total busy.
  double group_bubble = 0;
  int peak_in_flight = 0;  // most micro-batch chunks whose activations this rank held
  int outputs_freed = 0;   // sent outputs whose data was freed before their backward
  int outputs_kept = 0;    // sent outputs kept whole: something else shared their buffer
};

// Runs rank pp.rank()'s list of `schedule` (whose stage count must be pp.size()). Collective
// over pp: every rank of the group calls it with the same schedule.
PipelineStepStats run_pipeline(const Schedule& schedule, PipelineStage& stage, Communicator& pp,
                               const PipelineOptions& options = {});

}  // namespace tessera::parallel
