#pragma once
// DataLoader: batches of (inputs [B, T], targets [B, T]) int64 tensors from token shards, with
// targets = inputs shifted by one token, as in llm.c.
//
// A shard of n tokens holds (n - 1) / T windows; window w is tokens [w*T, w*T + T], so
// consecutive windows share one token and a batch of B consecutive windows is exactly the
// B*T + 1 contiguous tokens llm.c reads. A global step takes world_size * B windows; rank r
// takes the r-th group of B. Windows left over at the end of a shard (fewer than a global step)
// are skipped for that epoch, as in llm.c.
//
// Shuffled mode permutes the shard order per epoch and the windows of each shard per epoch,
// with Fisher-Yates over the Philox stream keyed by (seed, epoch, shard). The order depends only
// on the seed and the shard list: not on threads, ranks (all ranks share the permutation and
// take disjoint slices) or the time. Sequential mode (validation) reads shards and windows in
// order; with world_size 1 it yields llm.c's non-shuffled batches.
//
// The position is three counters (epoch, shard, batch). state() returns them with the settings
// they depend on; a loader restored from a state yields exactly the batches the original would
// have yielded next. The state is the same on every rank and fits any split of the same global
// step (batch_size * world_size windows): a run resumed on another number of ranks reads on
// from the same window.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tessera/core/tensor.h"
#include "tessera/data/token_shard.h"

namespace tessera::data {

struct LoaderOptions {
  int64_t batch_size = 1;  // B, per rank
  int64_t seq_len = 1024;  // T
  bool shuffle = true;
  uint64_t seed = 1337;
  int64_t rank = 0;
  int64_t world_size = 1;
  // When > 0, every token of every batch is checked against it (an error names the shard and
  // the byte offset of the bad id).
  int64_t vocab_size = 0;
};

// The loader's position and the settings it is only meaningful with. The same state serves every
// rank (rank is not part of it).
struct LoaderState {
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t shard = 0;  // position in this epoch's shard order
  int64_t batch = 0;  // next batch within that shard
  int64_t batch_size = 0;
  int64_t seq_len = 0;
  int64_t world_size = 1;
  bool shuffle = true;
  int64_t num_shards = 0;
  int64_t num_tokens = 0;

  nlohmann::json to_json() const;
  // Throws naming the missing or ill-typed field.
  static LoaderState from_json(const nlohmann::json& j);
};

struct Batch {
  Tensor inputs;   // i64 [B, T]
  Tensor targets;  // i64 [B, T]
};

// The shard files a pattern names: a directory (its *.bin files), a glob ("dir/x_train_*.bin")
// or one file; sorted by name. Throws when nothing matches, and for a directory that holds both
// *_train_* and *_val_* shards (one split must be chosen with a glob).
std::vector<std::string> resolve_shards(const std::string& pattern);

class DataLoader {
 public:
  DataLoader(std::vector<std::string> shard_paths, const LoaderOptions& options);
  DataLoader(const std::string& pattern, const LoaderOptions& options);

  // The next batch, moving to the next shard and epoch as needed.
  Batch next();

  LoaderState state() const;
  // Continues from a state taken from a loader over the same shards and settings; throws naming
  // the first setting that differs. The seed is taken from the state.
  void restore(const LoaderState& state);
  // Back to the first batch of epoch 0 (a validation pass starts here).
  void reset();

  int64_t epoch() const { return epoch_; }
  // Batches this rank yields per epoch.
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  int64_t num_tokens() const { return num_tokens_; }
  const std::vector<std::string>& shard_paths() const { return paths_; }
  const LoaderOptions& options() const { return options_; }

 private:
  struct ShardInfo {
    int64_t num_tokens;
    int64_t num_batches;  // global steps in this shard
  };

  // The file index of the shard at position `pos` of the current epoch's order.
  int64_t shard_at(int64_t pos) const;
  // The shard order of an epoch: a permutation (shuffled mode) or 0, 1, 2, ...
  std::vector<uint32_t> shard_order(uint64_t seed, int64_t epoch) const;
  void start_epoch();
  void open_current_shard();

  std::vector<std::string> paths_;
  LoaderOptions options_;
  std::vector<ShardInfo> shards_;
  int64_t num_tokens_ = 0;
  int64_t batches_per_epoch_ = 0;

  int64_t epoch_ = 0, shard_pos_ = 0, batch_pos_ = 0;
  std::vector<uint32_t> shard_order_;  // this epoch's shard order (shuffled mode)
  // The mapped current shard and its window order (shuffled mode).
  std::optional<TokenShard> current_;
  int64_t current_index_ = -1;
  std::vector<uint32_t> window_order_;
};

// A permutation of [0, n) by Fisher-Yates over the Philox stream under `key`; a pure function of
// (n, key).
std::vector<uint32_t> philox_permutation(uint32_t n, uint64_t key);

}  // namespace tessera::data
