#pragma once
// Shared by the single-process trainer (trainer.cpp) and the parallel one
// (parallel_training.cpp): the model config a run trains, the checkpoint it resumes from, its
// data loaders, the optimizer state of a checkpoint for one part of the model, and the samples
// printed at the end.
//
// Optimizer state in checkpoints: a single-process checkpoint holds the whole model's in
// optimizer.safetensors (scalars in state.json). A parallel one records its layout in
// state.json under "parallel" and holds one file per model part, optimizer_pp<P>_tp<T>
// .safetensors (scalars in its metadata), each nn::AdamW's format over that part's
// parameters. The data-parallel axis and the ZeRO stage do not change a part's state (it is
// gathered over dp), so a run resumes it under any dp and ZeRO stage, but only under the same
// tp, pp and virtual stages.

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/train_options.h"
#include "tessera/tessera.h"

namespace tessera::cli {

// <run_dir>/metrics.jsonl
std::string metrics_path(const TrainOptions& o);

struct ResumePoint {
  std::string dir;  // the checkpoint directory
  nn::CheckpointData data;
};

// The run's latest checkpoint under --resume auto, checked against the options that must not
// change (data, batch, sequence, seed, tokenizer); nullopt for a fresh run.
std::optional<ResumePoint> find_resume(const TrainOptions& o);

// The model config: a resumed run's comes from its checkpoint; otherwise from imported weights
// (into *imported), or the preset with overrides, whose vocabulary defaults to the tokenizer's.
// Checks the tokenizer and --seq-len against it.
nn::GPTConfig resolve_config(const TrainOptions& o, const data::Tokenizer& tokenizer,
                             const ResumePoint* resume, nn::StateDict* imported);

// The training loader (shuffled) or the validation one.
std::unique_ptr<data::DataLoader> make_loader(const TrainOptions& o, const std::string& pattern,
                                              int64_t vocab_size, bool shuffle);

// How a model is divided into parts that each hold their own optimizer state.
struct ModelSplit {
  int64_t tp = 1, pp = 1, virtual_stages = 1;
  bool operator==(const ModelSplit&) const = default;
  std::string describe() const;  // "tp2 x pp2 (V 1)"
};

// The split a checkpoint was written under (a single-process one: 1, 1, 1).
ModelSplit checkpoint_split(const nn::CheckpointData& checkpoint);

// "optimizer_pp0_tp1.safetensors"
std::string optimizer_part_file(int pp_rank, int tp_rank);

// The optimizer state of part (pp_rank, tp_rank) of `split` in `resume`, or nullopt with the
// reason in *why when the checkpoint was written under another split.
std::optional<nn::OptimizerState> load_optimizer_part(const ResumePoint& resume,
                                                      const ModelSplit& split, int pp_rank,
                                                      int tp_rank, std::string* why);

// Writes what load_optimizer_part reads, atomically, into a parallel checkpoint's directory.
void save_optimizer_part(const std::string& checkpoint_dir, int pp_rank, int tp_rank,
                         const nn::OptimizerState& state);

// --sample-tokens tokens from `net` after training, --num-samples times.
void print_samples(nn::GPT& net, const nn::GPTConfig& config, const data::Tokenizer& tokenizer,
                   const TrainOptions& o, Device device, std::ostream& out);

}  // namespace tessera::cli
