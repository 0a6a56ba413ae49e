#pragma once
// Shared by the single-process trainer (trainer.cpp) and the parallel one
// (parallel_training.cpp): the model config a run trains, the checkpoint it resumes from, its
// data loaders, the validation loss, the restore of a checkpoint's optimizer state, and the
// samples printed at the end.
//
// Optimizer state in checkpoints: every checkpoint, single-process or parallel, holds the whole
// model's in optimizer.safetensors (scalars in state.json under "optimizer"), in the format of
// nn::AdamW over nn::GPT(config): a parallel run gathers it (ParallelTrainer::
// gather_full_optimizer_state) and loads its slices under any layout, so a run resumes it under
// any dp, tp, pp, virtual stages and ZeRO stage, or in one process, whichever wrote it.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/data/loader.h"
#include "tessera/data/tokenizer.h"
#include "tessera/nn/gpt.h"
#include "tessera/nn/io/checkpoint.h"
#include "tessera/nn/io/sharded_checkpoint.h"
#include "tessera/nn/io/tensor_source.h"
#include "tessera/nn/optim/optimizer.h"
#include "tessera/train/options.h"

namespace tessera::parallel {
class Communicator;
}

namespace tessera::train {

struct ImportedWeights;  // detail/model_source.h

// The startup banner's account of --precision: "fp32", or what bf16/fp16 keep in which dtype
// (and fp16's loss-scale settings).
std::string precision_banner(const TrainOptions& o);

// The options that define the data order: a resume (and a node-local set) must match them.
inline constexpr const char* kDataOrderOptions[] = {"train_data", "batch_size", "seq_len", "seed",
                                                    "tokenizer"};

// <run_dir>/metrics.jsonl
std::string metrics_path(const TrainOptions& o);
// <run_dir>/checkpoints.jsonl: one line per save (rank 0's stall in the loop, the format and
// the snapshot, the bytes the snapshot holds).
std::string checkpoint_log_path(const TrainOptions& o);
// <run_dir>/flight: every rank's flight recorder dump, rank_N.json (parallel/comm/flight_watch.h).
std::string flight_dir(const TrainOptions& o);

struct ResumePoint {
  std::string dir;  // the checkpoint directory
  nn::CheckpointData data;  // of a sharded set: its step and state only (see set)
  // A sharded set, opened and validated but not read: each rank reads its own part.
  std::shared_ptr<const nn::ShardedSet> set;
  // A single-process checkpoint, checked but not read, under a layout: each rank reads its own
  // part of these files (nn::open_checkpoint with open_gathered).
  std::shared_ptr<const nn::TensorSource> model_files, optimizer_files;
  // The newer checkpoints --resume auto passed over because they do not load, and why.
  std::vector<nn::SkippedCheckpoint> skipped;
};

// A checkpoint opened by every rank of `world` together (nn::open_checkpoint; with
// open_gathered, a single-process one is opened by range): each rank checksums its share of
// the files (nn::ChecksumShare), then all agree (parallel::first_rank_error). So the job reads
// each file once for its checksum, not once per rank, and a file that one rank found corrupt
// fails the checkpoint on every rank, with that rank's message. Collective over `world`.
nn::LoadedCheckpoint open_checkpoint_together(parallel::Communicator& world, const std::string& dir,
                                              bool open_gathered);

// The checkpoint a run resumes from, checked against the options that must not change (data,
// batch, sequence, seed, tokenizer): under --resume auto the run's newest checkpoint that loads
// (nn::newest_good_checkpoint), under --resume DIR that directory; nullopt for a fresh run.
// Every candidate is opened together (open_checkpoint_together): collective over `world`.
std::optional<ResumePoint> find_resume(const TrainOptions& o, parallel::Communicator& world);

// "skipping checkpoint DIR: REASON", one line per checkpoint passed over.
std::string describe_skipped(const ResumePoint& resume);

// The model config: a resumed run's comes from its checkpoint; otherwise from imported weights
// (into *imported; of the overrides only dropout applies, and one that contradicts the weights
// or a preset throws), or the preset with overrides, whose vocabulary defaults to the
// tokenizer's.
// Checks the tokenizer and --seq-len against it.
nn::GPTConfig resolve_config(const TrainOptions& o, const data::Tokenizer& tokenizer,
                             const ResumePoint* resume, ImportedWeights* imported);

// The training loader (shuffled) or the validation one.
std::unique_ptr<data::DataLoader> make_loader(const TrainOptions& o, const std::string& pattern,
                                              int64_t vocab_size, bool shuffle);

// The validation loss: the mean of `loss` over the first min(--eval-batches, one epoch)
// batches of `val`, rewound first.
double validation_loss(data::DataLoader& val, const TrainOptions& o,
                       const std::function<double(const data::Batch&)>& loss);

// Restores a checkpoint's optimizer state through `load`; an error it throws is rethrown as one
// line naming the checkpoint's optimizer file. Returns why nothing was restored (a checkpoint
// without optimizer state), or "" when it was.
std::string restore_optimizer(const ResumePoint& resume,
                              const std::function<void(const nn::OptimizerState&)>& load);

// --sample-tokens tokens from `net` after training, --num-samples times.
void print_samples(nn::GPT& net, const nn::GPTConfig& config, const data::Tokenizer& tokenizer,
                   const TrainOptions& o, Device device, std::ostream& out);

}  // namespace tessera::train
