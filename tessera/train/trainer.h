#pragma once
// train::Trainer: Tessera's training engine, what `tessera train` runs and what a research
// codebase embeds. It owns everything around the optimizer step: the model (a preset with
// overrides, imported weights, or the run's latest checkpoint), the data (each data-parallel
// rank reads only its own rows of every global batch), the learning-rate schedule, evaluation,
// checkpoints (model and optimizer in the single-process format, so any layout resumes any
// other), metrics (console line and <run_dir>/metrics.jsonl) and the device.
//
//   train::TrainOptions o;                 // the keys of `tessera train --config`
//   o.train_data = "data/corpus_train_*.bin";
//   o.model_overrides = {{"n_layer", 4}, {"n_embd", 192}};
//   train::Trainer trainer(o);             // one process; under mpiexec or srun, the world
//   while (!trainer.done()) {
//     const train::StepMetrics m = trainer.step();
//     ...
//   }
//   trainer.save();
//
// or trainer.fit(&std::cout) for the whole loop with the options' cadence (log, evaluate,
// checkpoint, stop on request). Every call that runs a step, an evaluation or a save is
// collective over the run's world: every rank calls it.
//
// The step runs on one of two engines (step_engine.h):
//   - a GPT with AdamW: parallel::ParallelTrainer under the options' layout, dp x tp x pp with
//     ZeRO 0-3, every pipeline schedule, virtual stages and sequence parallelism, fp32, bf16 or
//     fp16, on one process (the layout (1, 1, 1)) or many;
//   - the caller's own model and optimizer (the ModuleParts constructor), and `--optimizer sgd`
//     or --stochastic-rounding: any Module under data parallelism with ZeRO 0 (gradients
//     averaged over the ranks). Tensor and pipeline parallelism and ZeRO >= 1 need the model's
//     parallel hooks (nn::ModelParallel, pipeline stages) and the sharded AdamW, which only the
//     GPT has; those options are refused for this engine with one line.
// Options that cannot apply are refused, never ignored: a layout flag on one process
// (--zero, --microbatches, --schedule, --virtual-stages, --sequence-parallel), a layout whose
// ranks differ from the world's.
//
// Devices: o.device "cpu", "cuda" (each rank takes GPU local rank mod the visible GPUs) or
// "cuda-sim" (the simulated device, which the program registers). Under several ranks CUDA
// tensors travel over the NCCL communicator (world.h): real NCCL on GPUs, the simulated NCCL
// on simulated devices, whichever the build was configured with (TESSERA_NCCL).
//
// The loss of a step is the mean over the global batch's counted targets (ignore_index -100
// excluded): every micro-batch is weighted by its share of the global count (one all-reduce
// of the counts), so layouts agree with one process however the ignored targets fall.

#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tessera/data/loader.h"
#include "tessera/data/tokenizer.h"
#include "tessera/nn/gpt.h"
#include "tessera/nn/io/checkpoint_writer.h"
#include "tessera/parallel/comm/communicator.h"
#include "tessera/train/heartbeat.h"
#include "tessera/train/metrics.h"
#include "tessera/train/module_engine.h"
#include "tessera/train/options.h"
#include "tessera/train/run_setup.h"
#include "tessera/train/step_engine.h"
#include "tessera/train/stragglers.h"

namespace tessera::parallel {
class FlightWatch;
}

namespace tessera::train {

class SnapshotStaging;  // detail/snapshot_staging.h
class RunLock;          // run_lock.h

// A layout that does not fit the model, the batch or the ranks, or an option that cannot apply
// to the run: one line, raised on every rank before any collective.
class LayoutError : public Error {
 public:
  using Error::Error;
};

// What fit() did.
struct FitResult {
  int64_t start_step = 0;  // where it began (0, or the resumed checkpoint's step)
  int64_t final_step = 0;
  double final_loss = 0;
  std::optional<double> final_val_loss;
  bool interrupted = false;  // stopped on request before max_steps
  std::string checkpoint;    // the last checkpoint written or resumed: its directory
};

class Trainer {
 public:
  // Everything from the options: the GPT (resumed from the run's latest checkpoint under
  // resume "auto", else imported from init_from, else fresh), its loaders and the engine.
  // world: the ranks (nullptr: default_world(device), world.h, on the options' device).
  // Collective over world.
  explicit Trainer(TrainOptions options, std::shared_ptr<parallel::Communicator> world = nullptr);
  // The caller's model, loss and optimizer on the ModuleEngine (data parallelism, ZeRO 0); the
  // data, schedule, clipping, precision, evaluation and checkpoints come from the options. The
  // parts' parameters must be on the options' device. Collective over world.
  Trainer(ModuleParts parts, TrainOptions options,
          std::shared_ptr<parallel::Communicator> world = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One optimizer step on the next global batch (grad_accum micro-batches of batch_size rows,
  // split over dp); then evaluation when the options' cadence says so (val_loss). Collective.
  StepMetrics step();
  // The validation loss over the first eval_batches batches of val_data. Collective.
  double evaluate();
  // A checkpoint of the current step under <run_dir>/checkpoints, atomically (keep_checkpoints
  // prunes older ones). Returns its directory. Collective. Sharded (checkpoint_format; the
  // default on several ranks), every rank writes its own part and rank 0 the manifest
  // (nn/io/sharded_checkpoint.h); gathered, rank 0 writes the single-process format. With wait
  // false the files are written in the background (nn/io/checkpoint_writer.h) and the call
  // returns once the state is copied; the next save, wait_for_save() or the destructor waits.
  std::string save(bool wait = true);
  // Blocks until a background save is on disk; rethrows its failure.
  void wait_for_save();
  // Restores a checkpoint directory written by any layout (model, optimizer, loader position,
  // loss scale, step). Collective.
  void load(const std::string& checkpoint_dir);
  // The loop: steps to max_steps, printing every log_every steps to *out (rank 0; null: quiet),
  // checkpointing every checkpoint_every steps and at the end, and stopping after the current
  // step once *stop is set on any rank (checkpointed, interrupted). Collective.
  FitResult fit(std::ostream* out = nullptr, const std::atomic<bool>* stop = nullptr);
  // fit() keeps a live progress line (StepMetrics::progress_line) at the bottom of *out,
  // redrawn in place after every step: for a terminal (the CLI turns it on when stdout is a
  // TTY); a log file gets only the plain lines.
  void set_live_progress(bool on) { live_progress_ = on; }
  // On several ranks: dumps this rank's flight recorder to <run_dir>/flight, asks every other
  // rank to dump too, and waits up to `seconds` for them (the recorder dumped already when a
  // call failed; this adds the request for an error of another kind). Returns the ranks whose
  // dump did not come; {} on one process.
  std::vector<int> dump_flight_and_wait(const std::string& reason, double seconds);
  // For the straggler tests: from step from_step on, every step of this rank spends `ms`
  // more milliseconds in `phase`: "data" (a sleep while the batch is read) or "compute" (a
  // busy spin inside the engine's step).
  void plant_delay(const std::string& phase, double ms, int64_t from_step = 1);
  // Beats (heartbeat.h) from fit(): after setup, after every step, around every save.
  void set_heartbeat(std::shared_ptr<Heartbeat> heartbeat) { heartbeat_ = std::move(heartbeat); }

  bool done() const { return step_ >= options_.max_steps; }
  int64_t steps_done() const { return step_; }
  const TrainOptions& options() const { return options_; }
  const nn::GPTConfig& model_config() const { return config_; }
  const data::Tokenizer& tokenizer() const { return *tokenizer_; }
  Device device() const { return device_; }
  parallel::Communicator& world() { return *world_; }
  StepEngine& engine() { return *engine_; }
  // The whole model's weights in the single-process format, on the CPU, every rank. Collective.
  nn::StateDict full_state() { return engine_->gather_model(); }
  // The resumed checkpoint's directory, or "" for a fresh run; and why its optimizer state was
  // not restored ("" when it was).
  const std::string& resumed_from() const { return resumed_from_; }
  const std::string& optimizer_note() const { return optimizer_note_; }
  // The startup banner (resolved options, model, layout, peak, device, precision).
  std::string banner() const;

 private:
  void init_common();
  void build_loaders();
  void resume_from(const ResumePoint& resume);
  // Runs `load` (an engine's read of only this rank's part, given the optimizer's scalars when
  // `optimizer`) and, when it read, restores the run's progress. False: the engine takes the
  // single-process state instead. Errors name the checkpoint.
  bool resume_by_part(const ResumePoint& resume, bool optimizer,
                      const std::function<bool(const nlohmann::json* scalars)>& load);
  // The next global batch's rows for this dp rank (grad_accum loader batches stacked).
  data::Batch next_rows();
  // The traced step's spans (data, the step, its calls); writes <run_dir>/trace/rank_N.json
  // after the last traced step.
  void trace_step(int64_t begin_us, const PhaseTimes& phases, bool traced_inside, double loss);
  std::vector<RankMetrics> gather_rank_metrics(const EngineStep& s, const PhaseTimes& phases);
  // Whether `mine` holds on any rank (one all-reduce; no collective on one process).
  bool any_rank(bool mine);
  bool agree_on_stop(const std::atomic<bool>* stop);
  void take_run_lock();
  // What a checkpoint's state.json (or manifest) holds besides the tensors.
  // `durable`: a checkpoint another directory may load, which carries the tokenizer itself
  // (data::tokenizer_record); a node-local set, read only by this run, does not.
  nlohmann::json checkpoint_state(const nlohmann::json& optimizer_scalars, bool durable) const;
  bool sharded_checkpoints() const;
  std::string save_sharded(bool wait);
  // How sharded and local saves snapshot the state (--checkpoint-snapshot, auto resolved);
  // and, before a save, the writer and that snapshot, with the engine's update fence
  // installed unless it copies.
  nn::CheckpointWriter::Snapshot snapshot_mode() const;
  nn::CheckpointWriter::Snapshot begin_snapshot();
  // For a staged snapshot (a GPU's state downloaded on a side stream into page-locked
  // memory), replaces `tensors` by the host views and returns the bytes staged; for a streamed
  // one of GPU state, settles the device and gives the writer its chunked reads; 0 otherwise.
  int64_t stage_snapshot(nn::CheckpointWriter::Snapshot snapshot,
                         const std::vector<Tensor*>& tensors);
  // What lands a staged snapshot of GPU state (its downloads, on this thread); none for any
  // other, so that a staged snapshot of host state is copied on the writer's thread.
  std::function<void()> snapshot_land(nn::CheckpointWriter::Snapshot snapshot);
  // The node-local tier: this rank's own state into local_dir(); and, at start, every rank's
  // agreement (two all-reduces) on a local step newer than durable_step, loaded if they agree.
  std::string save_local();
  std::string canonical_run_dir() const;
  bool resume_from_local(int64_t durable_step);
  std::string local_dir() const;
  nlohmann::json local_fingerprint(const LocalState& state) const;
  // The loader position, precision state and step of a checkpoint's state; the logs cut there.
  void restore_progress(const nlohmann::json& state, int64_t step, const std::string& dir);

  TrainOptions options_;
  std::shared_ptr<parallel::Communicator> world_;
  std::unique_ptr<RunLock> run_lock_;  // rank 0's: one job per run directory
  Device device_ = Device::cpu();
  std::unique_ptr<data::Tokenizer> tokenizer_;
  nlohmann::json tokenizer_record_;  // tokenizer_ as a checkpoint records it
  nn::GPTConfig config_;
  std::unique_ptr<StepEngine> engine_;
  std::unique_ptr<data::DataLoader> train_, val_;
  int64_t step_ = 0;
  double peak_gflops_ = 0;
  std::string peak_text_;
  std::string resumed_from_, optimizer_note_;
  std::string skipped_checkpoints_;  // describe_skipped's lines, for the banner
  bool custom_model_ = false;
  std::shared_ptr<Heartbeat> heartbeat_;
  std::unique_ptr<parallel::FlightWatch> flight_watch_;
  std::optional<StragglerDetector> stragglers_;     // rank 0 of several
  std::unique_ptr<parallel::StepTrace> trace_;      // while the traced steps run
  std::pair<int64_t, int64_t> trace_range_{0, -1};  // options_.trace_range(), parsed once
  std::string planted_phase_;
  double planted_ms_ = 0;
  int64_t planted_from_ = 1;
  std::unique_ptr<nn::CheckpointWriter> writer_;  // background saves
  std::unique_ptr<SnapshotStaging> staging_;      // GPU snapshots, page-locked
  bool update_fence_set_ = false;  // the engine waits for a streamed snapshot before updates
  int64_t chunk_bytes_ = 0;  // the chunk the writer reads GPU state through (0: none yet)
  double snapshot_wait_s_ = 0;     // this step's wait
  bool live_progress_ = false;
  std::string local_note_;  // the banner's line on the node-local tier at resume
};

}  // namespace tessera::train
