#pragma once
// Training checkpoints (single process): one directory per step,
//
//   <run_dir>/checkpoints/step_00000042/
//       model.safetensors       the model's state dict
//       optimizer.safetensors   the optimizer's tensors (moments, master weights, ...)
//       state.json              step, the caller's state (config, optimizer scalars, RNG
//                               states, loader position, metadata), and for each tensor file
//                               its size, checksum and tensor list
//   <run_dir>/checkpoints/latest   "step_00000042": the newest complete checkpoint
//
// Saving writes everything into a temporary directory beside the target, fsyncs it, renames
// it into place and only then rewrites `latest` (each step atomic, see core/file_io.h). A crash
// at any point therefore leaves `latest` naming a complete checkpoint; leftovers of an
// interrupted save are temporary names that readers ignore and the next save removes.
// One process writes a run directory at a time.
//
// Loading validates everything it reads: a missing file, corrupt JSON, a tensor file whose
// size, checksum or tensor list disagrees with state.json is an error naming the file.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/nn/module.h"

namespace tessera::nn {

// The tensor files inside a checkpoint directory.
constexpr const char* kCheckpointModelFile = "model.safetensors";
constexpr const char* kCheckpointOptimizerFile = "optimizer.safetensors";

struct CheckpointData {
  int64_t step = 0;
  StateDict model;
  StateDict optimizer;
  // A JSON object owned by the caller: config, optimizer scalars, RNG states, loader state,
  // free-form metadata. Stored verbatim (numbers round-trip exactly).
  nlohmann::json state = nlohmann::json::object();
};

// <run_dir>/checkpoints
std::string checkpoints_dir(const std::string& run_dir);
// "step_00000042" (at least 8 digits).
std::string checkpoint_name(int64_t step);

// Writes data.step's checkpoint and points `latest` at it; returns its directory. An existing
// checkpoint of the same step is replaced atomically. With keep > 0, of the checkpoints older
// than this one only the newest keep - 1 survive (deleted after the new one is published);
// newer ones, left by a run that was resumed from an earlier step, are never touched.
std::string save_checkpoint(const std::string& run_dir, const CheckpointData& data,
                            int64_t keep = 0);

// What to read of a checkpoint: everything, or the model's weights alone (inference and
// export, which would otherwise read, checksum and hold the AdamW moments: twice the model),
// or, of an unsharded checkpoint, the model file checked (size, checksum, the tensor list
// against state.json) but not read: a tensor-parallel rank then reads only its slices of it
// (safetensors_reader.h, parallel/tp/full_state.h).
enum class CheckpointParts { all, model, model_checked, all_checked };

// Which of a checkpoint's files a reader checksums (the other checks, sizes, headers and
// tensor lists, are made whatever the share): file i when i % ranks == rank, where i is a
// sharded set's shard rank, or 0 for a single-process checkpoint's model file and 1 for its
// optimizer's. A checksum reads its file whole, so the ranks of a job that open one checkpoint
// together each check a share and then agree on the verdict (train::find_resume): the job
// reads every file once for its checksum, not once per rank. The default checks every file.
struct ChecksumShare {
  int rank = 0;
  int ranks = 1;
  bool covers(size_t file) const { return ranks <= 1 || file % size_t(ranks) == size_t(rank); }
};

// Reads and validates one checkpoint directory. With CheckpointParts::model, `optimizer` is
// left empty and its file is neither read nor checked; with model_checked, `model` is left
// empty too; with all_checked, both files are checked (size, checksum, tensor list) and neither
// is read (a sharded set is refused by both). Given `into` (a model's state dict),
// the model tensors that match one of it by name, shape and dtype are read straight into it
// (read_safetensors), and `model` holds those very tensors; a sharded set reads into fresh
// tensors. Only the files `share` covers are checksummed.
CheckpointData load_checkpoint(const std::string& dir, CheckpointParts parts = CheckpointParts::all,
                               const StateDict* into = nullptr, ChecksumShare share = {});

// The checkpoint `latest` names; without a `latest` file (a crash right after the first
// publish), the highest-step checkpoint; nullopt when the run has none. A `latest` that is
// corrupt or names a missing directory is an error naming both.
std::optional<std::string> find_latest_checkpoint(const std::string& run_dir);

// Steps of the published checkpoints in run_dir, ascending (temporary directories excluded).
std::vector<int64_t> list_checkpoints(const std::string& run_dir);

// A checkpoint that a resume passed over: its directory (or the `latest` file) and why, the
// load error's one line.
struct SkippedCheckpoint {
  std::string dir;
  std::string reason;
};

struct ShardedSet;  // sharded_checkpoint.h
class TensorSource;  // tensor_source.h

struct LoadedCheckpoint {
  std::string dir;
  CheckpointData data;
  // A sharded set opened but not read (open_checkpoint): data holds its step and state only,
  // and the caller reads what it needs (read_pieces, or read_sharded_checkpoint for all).
  std::shared_ptr<const ShardedSet> set;
  // A single-process checkpoint checked but not read (open_checkpoint with open_gathered): data
  // holds its step and state only, and these its model's and optimizer's tensors, read by
  // range (tensor_source.h), so that each rank of a layout reads only its part.
  std::shared_ptr<const TensorSource> model_files, optimizer_files;
};

// A checkpoint directory validated for resuming: a sharded one only opened
// (open_sharded_checkpoint: every check, no tensor read), so that each rank then reads its own
// part; a single-process one read (as load_checkpoint), or, with open_gathered, checked
// (CheckpointParts::all_checked) and opened by range. Only the files `share` covers are
// checksummed.
LoadedCheckpoint open_checkpoint(const std::string& dir, bool open_gathered = false,
                                 ChecksumShare share = {});

// The newest checkpoint of run_dir that loads and validates: the one `latest` names, then the
// older published ones, newest first. One that does not load (a missing, truncated or corrupt
// file, a bad checksum) is passed over and recorded in *skipped, as is a `latest` that cannot
// be read (the candidates then start from the highest step). Checkpoints newer than the one
// `latest` names are never candidates: they belong to a history the run was resumed away from.
// nullopt when the run has no checkpoint; an error listing every skip when none loads.
// With open_sharded, candidates are taken with open_checkpoint() (a sharded set is opened, not
// read), and with open_gathered too, open_checkpoint(dir, open_gathered).
std::optional<LoadedCheckpoint> load_newest_good_checkpoint(const std::string& run_dir,
                                                            std::vector<SkippedCheckpoint>* skipped,
                                                            bool open_sharded = false,
                                                            bool open_gathered = false);

// load_newest_good_checkpoint with each candidate opened by `open`, which returns it or throws
// an Error saying why it does not load. The candidates and their order depend only on the run
// directory's listing, so the ranks of a job call `open` on the same directories in the same
// order, and it may be collective (each rank checks a share, then they agree).
std::optional<LoadedCheckpoint> newest_good_checkpoint(
    const std::string& run_dir, std::vector<SkippedCheckpoint>* skipped,
    const std::function<LoadedCheckpoint(const std::string& dir)>& open);

}  // namespace tessera::nn
