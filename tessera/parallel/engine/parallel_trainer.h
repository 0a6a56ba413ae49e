#pragma once
// ParallelTrainer: one GPT trained over a dp x pp x tp mesh with ZeRO, the composition of the
// parallel layer's parts:
//
//   world (wrapped in a TimedCommunicator, to measure blocked communication time)
//     -> DeviceMesh (dp, pp, tp groups)
//     -> this rank's chunks: for each virtual stage c, an nn::GPT holding the tensor-parallel
//        shard of model stage c * pp + pp_rank's layers (pipeline/partition.h), built with the
//        tp ops (tp/tensor_parallel.h) and ZeRO-3 unit hooks
//     -> one DataParallel over every chunk's parameters on the dp group (data/), with the global
//        norm summed over dp, tp and pp and the tied embedding summed between the first and
//        last stage
//     -> the pipeline executor running the schedule's action list (pipeline/executor.h).
//     -> under bf16/fp16, ParallelPrecision (parallel_precision.h): the chunks above are the
//        fp32 master; the pipeline runs compute chunks in that dtype, rounded from the master
//        after every update, and fp16's loss scale multiplies each micro-batch's loss gradient.
//
// One step takes the GLOBAL batch [B, T] on every rank (step), or only this rank's rows
// (step_local). Data-parallel rank d trains rows [d B / D, (d + 1) B / D), split into M
// micro-batches; each micro-batch's mean loss is weighted by its share of the global count of
// counted targets (not ignore_index) and the gradients averaged over dp, so the update is that
// of the mean loss over the global batch as one process computes it, however the ignored
// targets fall. The reported loss is that global mean, the same on every rank.
//
// Every rank builds its part from the same keyed init, so every layout starts from the single-
// process model's weights. gather_full_state() returns the single-process state dict (names and
// shapes of nn::GPT(config)); load_full_state() loads one into any layout.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tessera/nn/gpt.h"
#include "tessera/nn/io/sharded_checkpoint.h"
#include "tessera/nn/io/tensor_source.h"
#include "tessera/parallel/data/data_parallel.h"
#include "tessera/parallel/engine/gpt_stage.h"
#include "tessera/parallel/engine/parallel_config.h"
#include "tessera/parallel/engine/parallel_precision.h"
#include "tessera/parallel/engine/timed_communicator.h"
#include "tessera/parallel/mesh.h"
#include "tessera/parallel/pipeline/schedule.h"
#include "tessera/parallel/step_trace.h"
#include "tessera/parallel/tp/tensor_parallel.h"

namespace tessera::parallel {

// Bytes this rank holds: DataParallel's buffers (ZeRO-3: the shard, plus parameters_peak while
// units are gathered) and the activations, measured as the allocator's peak during the forward
// and backward passes above what was live when they began (saved activations, micro-batches in
// flight, transient gradient staging and gathered ZeRO-3 units). Under bf16/fp16 parameters
// also counts the compute-dtype copies the pipeline runs (at ZeRO-3 their shard, and the units
// gathered in parameters_peak).
struct RankMemory {
  int64_t parameters = 0;
  int64_t parameters_peak = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
  int64_t activations = 0;
  // Host bytes of an offloaded optimizer: master shard, moments, gradient downloads, rounded
  // copy (the figures above are the device's).
  int64_t offloaded = 0;
};

struct ParallelStepStats {
  int64_t step = 0;
  double loss = 0;        // mean over the global batch; the same on every rank
  double grad_norm = 0;   // global, before clipping
  double clip = 1;        // the clip factor applied
  bool finite = true;     // false: the update was skipped (inf/NaN gradient)
  double loss_scale = 1;  // fp16: the scale this step's backward ran with (1 otherwise)
  bool skipped = false;   // fp16 overflow: nothing was updated and the scale backed off
  double lr = 0;
  double seconds = 0;       // wall time of the step on this rank
  double comm_seconds = 0;  // this rank's time blocked in communication (timed_communicator.h)
  // The step's wall time by phase on this rank (each including the communication it blocked
  // in): the pipeline's forwards and backwards (executor.h), and the update (clip, optimizer,
  // ZeRO's gathers).
  double forward_seconds = 0, backward_seconds = 0, optimizer_seconds = 0;
  // What this rank sent in the step over every group, in bytes: as a ring sends them (wire)
  // and as the calls' sizes (message), comm/traffic.h. Compression shows here.
  int64_t comm_wire_bytes = 0;
  int64_t comm_message_bytes = 0;
  double bubble = 0;        // the pipeline group's measured idle / busy (executor.h); 0 at pp 1
  // This rank's sent activations whose data the executor freed before their backward, and
  // those it kept because something else shared their buffer (executor.h); 0 at pp 1.
  int pipeline_outputs_freed = 0, pipeline_outputs_kept = 0;
  RankMemory memory;
};

class ParallelTrainer {
 public:
  // Validates (layout_error; throws its line on every rank before any collective), then
  // builds the mesh over `world` and this rank's part of the model. Collective over world.
  ParallelTrainer(std::shared_ptr<Communicator> world, const nn::GPTConfig& model,
                  const ParallelConfig& config);
  ~ParallelTrainer();
  ParallelTrainer(const ParallelTrainer&) = delete;
  ParallelTrainer& operator=(const ParallelTrainer&) = delete;

  // One training step on the global batch: inputs and targets i32/i64 [B, T], the same on
  // every rank; this rank trains its dp rank's rows (step_local). Collective over world.
  ParallelStepStats step(const Tensor& inputs, const Tensor& targets);
  // The same step given only this data-parallel rank's rows [B / dp, T] (rows
  // [d B / dp, (d + 1) B / dp) of the global batch for dp rank d): what a loader that reads
  // only this rank's rows feeds (train::Trainer). Every micro-batch's mean loss is weighted by
  // its share of the global count of targets that are not ignore_index (one all-reduce of the
  // count over dp), so the update and the loss are those of one process's mean over the global
  // batch even when micro-batches count different numbers of targets. Collective over world.
  ParallelStepStats step_local(const Tensor& inputs, const Tensor& targets);

  // The single-process state dict, on every rank. Collective over world.
  nn::StateDict gather_full_state();
  // Loads a single-process state dict (every name of nn::GPT(config), nothing else) into this
  // rank's part. Throws on every rank, naming the problem, when names are missing or unknown.
  // Collective over world.
  void load_full_state(const nn::StateDict& full);
  // The AdamW state in the single-process format (nn::AdamW over nn::GPT(config)), on every
  // rank, and its load into any layout (full_optimizer_state.h). Collective over world.
  nn::OptimizerState gather_full_optimizer_state();
  void load_full_optimizer_state(const nn::OptimizerState& full);

  // This rank's share of a sharded checkpoint (nn/io/sharded_checkpoint.h), as views of the
  // live state: of every bucket, its dp shard of the fp32 master and of both AdamW moments,
  // cut into pieces of the single-process tensors (a tensor-parallel replicated parameter's
  // pieces split again over tp, a tied copy left out), so that every element of the model and
  // the optimizer is written by exactly one rank. No collective; the views change at the next
  // update.
  std::vector<nn::ShardPiece> checkpoint_pieces() const;
  // Resumes from a sharded set written under any layout (or by tessera ckpt convert): reads
  // into this rank's live state exactly the parts it holds (nn::read_pieces), so no rank builds
  // the single-process state. With optimizer_scalars (the single-process AdamW scalars, as
  // load_full_optimizer_state's), also the moments and the optimizer's counters; without, the
  // weights only. A set of another model is refused before anything changes. Collective only
  // as the compute copy's refresh is.
  void load_checkpoint_set(const nn::ShardedSet& set, const nlohmann::json* optimizer_scalars);
  // The weights from single-process tensors read by range (nn/io/tensor_source.h: Hugging Face
  // Llama shards, a checkpoint's file), each rank reading only what it holds, as a sharded set
  // loads; the optimizer is untouched. Refused on every rank alike, before anything changes,
  // unless the source holds exactly the model's names and shapes. Collective over pp and as
  // the compute copy's refresh is.
  void load_model_source(const nn::TensorSource& source);
  // A single-process checkpoint's files read by range (nn::open_checkpoint with open_gathered),
  // as a sharded set loads: the weights from `model`, and with `optimizer` and
  // optimizer_scalars (the single-process AdamW's) the moments and counters too. Refused on
  // every rank alike, before anything changes, unless the files hold exactly the model's (and
  // AdamW's) tensors. Collective as load_model_source.
  void load_checkpoint_source(const nn::TensorSource& model, const nn::TensorSource* optimizer,
                              const nlohmann::json* optimizer_scalars);
  // This rank's own state, enough to restore this rank of the same layout with no other
  // rank's files (a node-local checkpoint): per bucket b, the master weights it holds
  // ("master.<b>": the bucket, or its shard at ZeRO-3 and offloaded) and the AdamW moments it
  // holds ("exp_avg.<b>", "exp_avg_sq.<b>": the bucket at ZeRO 0, its shard above). Views of
  // the live state, as checkpoint_pieces().
  nn::StateDict local_state() const;
  // Copies local_state() of the same rank and layout back (names and shapes checked first:
  // nothing changes unless all fit), restores the update count and learning rate from
  // optimizer_scalars() and refreshes the compute copy. Collective only as the compute
  // copy's refresh is (ZeRO-3 units held).
  void load_local_state(const nn::StateDict& state, const nlohmann::json& optimizer_scalars);
  // Called in every step after the backward passes and before anything updates the master
  // weights or the optimizer state: a checkpoint streamed from checkpoint_pieces() waits there.
  void set_before_update(std::function<void()> hook) { before_update_ = std::move(hook); }
  // While set, each step adds its spans to `trace` (step_trace.h): the step track's setup,
  // forward/backward, loss and update, and the pipeline's forwards and backwards. Null: off.
  void set_trace(StepTrace* trace) { trace_ = trace; }
  // The optimizer's scalars for such a checkpoint (as gather_full_optimizer_state's, but the
  // groups list this rank's parameters: a load replaces them). Local.
  nlohmann::json optimizer_scalars() const { return dp_->optimizer().scalars(); }

  // The mean loss over a batch, ids and targets integer [B, T] with B divisible by dp and T
  // the config's seq_len, the same on every rank: a forward-only pipeline pass
  // (parallel_eval.h) in eval mode (no dropout, no graph) over this dp rank's rows, averaged
  // over dp. Weights, optimizer state and the step are untouched. Collective over world.
  double evaluate(const Tensor& inputs, const Tensor& targets);
  // The same given this dp rank's rows only (every dp rank the same number of rows).
  double evaluate_local(const Tensor& inputs, const Tensor& targets);

  const DeviceMesh& mesh() const { return *mesh_; }
  const ParallelConfig& config() const { return config_; }
  const nn::GPTConfig& model_config() const { return model_; }
  const Schedule& schedule() const { return schedule_; }
  // The chunks the pipeline runs: in the compute dtype (the fp32 master chunks under fp32).
  const std::vector<std::shared_ptr<nn::GPT>>& chunks() const { return stage_->chunks(); }
  // The mixed-precision policy and fp16's loss scaler (its state goes into checkpoints).
  ParallelPrecision& precision() { return *precision_; }
  const ParallelPrecision& precision() const { return *precision_; }
  DataParallel& data_parallel() { return *dp_; }
  int64_t steps_done() const { return step_; }
  // The step the next call to step() runs (its learning rate and dropout masks); for resuming.
  void set_step(int64_t step);
  // "dp2 x pp2 x tp2, ZeRO-1, 1f1b v1 m4, batch 8 x 8; rank 5: pp stage 0 layers h.0-h.1, ..."
  std::string describe() const;

 private:
  nn::ParamMeta meta_of(const std::string& name) const;
  // The pieces this rank writes of a sharded checkpoint (held false), or all it holds (true).
  std::vector<nn::ShardPiece> state_pieces(bool held) const;
  // The mean over the dp group of one value per rank (on the device's communicator).
  double dp_average(double value);

  nn::GPTConfig model_;
  ParallelConfig config_;
  std::shared_ptr<Communicator> inner_world_;
  std::shared_ptr<TimedCommunicator> world_;
  std::shared_ptr<DeviceMesh> mesh_;
  std::shared_ptr<tp::TensorParallel> tp_;
  Schedule schedule_;
  std::shared_ptr<DeferredUnitHooks> hooks_;
  std::shared_ptr<DeferredUnitHooks> compute_hooks_;  // the compute chunks' (ZeRO-3, bf16/fp16)
  std::unique_ptr<GptPipelineStage> stage_;
  std::unique_ptr<DataParallel> dp_;
  std::vector<std::shared_ptr<nn::GPT>> masters_;  // fp32 chunks: DataParallel's parameters
  std::unique_ptr<ParallelPrecision> precision_;
  std::map<std::string, nn::ParamMeta> metas_;
  int64_t step_ = 0;
  std::function<void()> before_update_;
  StepTrace* trace_ = nullptr;
};

}  // namespace tessera::parallel
