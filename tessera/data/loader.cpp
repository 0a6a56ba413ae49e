// The data loader. Per batch it copies B*(T+1) tokens out of the mapped shard (memory bound,
// negligible next to a training step); per shard and epoch it draws one Fisher-Yates
// permutation of the shard's windows (about 2 Philox blocks per window).

#include "tessera/data/loader.h"

#include <glob.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <numeric>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/detail/philox.h"

namespace tessera::data {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Independent Philox keys per (seed, epoch, stream); the shard order uses its own stream.
constexpr uint64_t kShardOrderStream = ~0ull;

uint64_t stream_key(uint64_t seed, int64_t epoch, uint64_t stream) {
  return splitmix64(splitmix64(splitmix64(seed) ^ uint64_t(epoch)) ^ stream);
}

int64_t json_int(const nlohmann::json& j, const char* key) {
  TESSERA_CHECK(j.contains(key), "loader state: missing field '", key, "'");
  const nlohmann::json& v = j.at(key);
  TESSERA_CHECK(v.is_number_integer(), "loader state: '", key, "' must be an integer, got ",
                v.dump());
  bool in_range =
      v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT64_MAX) : v.get<int64_t>() >= 0;
  TESSERA_CHECK(in_range, "loader state: '", key, "' must be in [0, 2^63), got ", v.dump());
  return v.get<int64_t>();
}

void check_same(const char* field, int64_t in_state, int64_t here) {
  TESSERA_CHECK(in_state == here, "loader state: ", field, " is ", in_state, " in the state but ",
                here, " in this loader; resume with the same shards and batch settings");
}

}  // namespace

std::vector<uint32_t> philox_permutation(uint32_t n, uint64_t key) {
  std::vector<uint32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0u);
  uint64_t draw = 0;
  for (uint32_t i = n; i > 1; --i) {
    uint64_t r = (uint64_t(philox::bits(key, draw)) << 32) | philox::bits(key, draw + 1);
    draw += 2;
    // 64 random bits modulo i: the bias is below i / 2^64, far under anything measurable.
    std::swap(perm[i - 1], perm[size_t(r % i)]);
  }
  return perm;
}

nlohmann::json LoaderState::to_json() const {
  return {{"seed", seed},
          {"epoch", epoch},
          {"shard", shard},
          {"batch", batch},
          {"batch_size", batch_size},
          {"seq_len", seq_len},
          {"world_size", world_size},
          {"shuffle", shuffle},
          {"num_shards", num_shards},
          {"num_tokens", num_tokens}};
}

LoaderState LoaderState::from_json(const nlohmann::json& j) {
  TESSERA_CHECK(j.is_object(), "loader state: expected a JSON object, got ", j.dump());
  LoaderState s;
  TESSERA_CHECK(j.contains("seed") && j.at("seed").is_number_unsigned(),
                "loader state: 'seed' must be an unsigned integer");
  s.seed = j.at("seed").get<uint64_t>();
  s.epoch = json_int(j, "epoch");
  s.shard = json_int(j, "shard");
  s.batch = json_int(j, "batch");
  s.batch_size = json_int(j, "batch_size");
  s.seq_len = json_int(j, "seq_len");
  s.world_size = json_int(j, "world_size");
  TESSERA_CHECK(j.contains("shuffle") && j.at("shuffle").is_boolean(),
                "loader state: 'shuffle' must be true or false");
  s.shuffle = j.at("shuffle").get<bool>();
  s.num_shards = json_int(j, "num_shards");
  s.num_tokens = json_int(j, "num_tokens");
  return s;
}

std::vector<std::string> resolve_shards(const std::string& pattern) {
  namespace fs = std::filesystem;
  std::vector<std::string> paths;
  std::error_code ec;
  if (fs::is_directory(pattern, ec)) {
    for (const auto& entry : fs::directory_iterator(pattern)) {
      if (entry.is_regular_file() && entry.path().extension() == ".bin") {
        paths.push_back(entry.path().string());
      }
    }
    TESSERA_CHECK(!paths.empty(), "data loader: directory ", pattern, " has no .bin shards");
    // A folder written by prepare holds both splits; reading all of it would train on the
    // validation data.
    auto has = [&](const char* part) {
      return std::any_of(paths.begin(), paths.end(), [&](const std::string& p) {
        return fs::path(p).filename().string().find(part) != std::string::npos;
      });
    };
    TESSERA_CHECK(!(has("_train_") && has("_val_")), "data loader: directory ", pattern,
                  " holds both training and validation shards; choose one split with a glob",
                  " such as ", pattern, "/*_train_*.bin");
  } else if (pattern.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) paths.emplace_back(g.gl_pathv[i]);
    ::globfree(&g);
    TESSERA_CHECK(rc == 0 || rc == GLOB_NOMATCH, "data loader: glob '", pattern, "' failed");
    TESSERA_CHECK(!paths.empty(), "data loader: no shard matches '", pattern, "'");
  } else {
    TESSERA_CHECK(fs::is_regular_file(pattern, ec), "data loader: shard ", pattern,
                  " does not exist or is not a file");
    paths.push_back(pattern);
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

DataLoader::DataLoader(const std::string& pattern, const LoaderOptions& options)
    : DataLoader(resolve_shards(pattern), options) {}

DataLoader::DataLoader(std::vector<std::string> shard_paths, const LoaderOptions& options)
    : paths_(std::move(shard_paths)), options_(options) {
  const LoaderOptions& o = options_;
  TESSERA_CHECK(!paths_.empty(), "data loader: no shards given");
  // Bounds keep B * T * world_size far from int64 overflow.
  constexpr int64_t kMaxDim = int64_t(1) << 30;
  TESSERA_CHECK(
      o.batch_size >= 1 && o.batch_size <= kMaxDim && o.seq_len >= 1 && o.seq_len <= kMaxDim,
      "data loader: batch_size and seq_len must be in [1, 2^30], got B=", o.batch_size,
      " T=", o.seq_len);
  TESSERA_CHECK(o.world_size >= 1 && o.world_size <= 65536 && o.rank >= 0 && o.rank < o.world_size,
                "data loader: rank ", o.rank, " is not in [0, world_size=", o.world_size, ")");
  TESSERA_CHECK(paths_.size() <= size_t(UINT32_MAX), "data loader: too many shards");
  const int64_t step_windows = o.batch_size * o.world_size;
  for (const std::string& path : paths_) {
    ShardHeader h = read_shard_header(path);
    int64_t windows = h.num_tokens >= 1 ? (h.num_tokens - 1) / o.seq_len : 0;
    int64_t batches = windows / step_windows;
    TESSERA_CHECK(batches >= 1, "data loader: shard ", path, " has ", h.num_tokens,
                  " tokens, but one batch needs world_size*B*T+1 = ", o.world_size, "*",
                  o.batch_size, "*", o.seq_len, "+1 = ", step_windows * o.seq_len + 1);
    shards_.push_back({h.num_tokens, batches});
    num_tokens_ += h.num_tokens;
    batches_per_epoch_ += batches;
  }
  start_epoch();
}

std::vector<uint32_t> DataLoader::shard_order(uint64_t seed, int64_t epoch) const {
  uint32_t n = uint32_t(shards_.size());
  if (options_.shuffle) return philox_permutation(n, stream_key(seed, epoch, kShardOrderStream));
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  return order;
}

void DataLoader::start_epoch() {
  shard_order_ = shard_order(options_.seed, epoch_);
  current_index_ = -1;
}

int64_t DataLoader::shard_at(int64_t pos) const {
  return shard_order_[size_t(pos)];
}

void DataLoader::open_current_shard() {
  int64_t index = shard_at(shard_pos_);
  if (current_index_ == index) return;
  if (!current_ || current_->path() != paths_[size_t(index)]) {
    current_.reset();
    TokenShard shard(paths_[size_t(index)]);
    // The file must still be the one validated at construction.
    TESSERA_CHECK(shard.size() == shards_[size_t(index)].num_tokens, "data loader: shard ",
                  shard.path(), " changed since the loader opened it: ", shard.size(),
                  " tokens now, ", shards_[size_t(index)].num_tokens, " before");
    current_.emplace(std::move(shard));
  }
  window_order_.clear();
  if (options_.shuffle) {
    uint32_t windows = uint32_t((current_->size() - 1) / options_.seq_len);
    window_order_ = philox_permutation(windows, stream_key(options_.seed, epoch_, uint64_t(index)));
  }
  current_index_ = index;
}

Batch DataLoader::next() {
  open_current_shard();
  const int64_t B = options_.batch_size, T = options_.seq_len;
  Batch batch{empty(Shape{B, T}, DType::i64), empty(Shape{B, T}, DType::i64)};
  int64_t* inputs = batch.inputs.data<int64_t>("data loader");
  int64_t* targets = batch.targets.data<int64_t>("data loader");
  std::vector<int64_t> window(size_t(T + 1));
  const int64_t first = batch_pos_ * B * options_.world_size + options_.rank * B;
  const int64_t width = token_width(current_->dtype());
  for (int64_t b = 0; b < B; ++b) {
    int64_t slot = first + b;
    int64_t w = options_.shuffle ? int64_t(window_order_[size_t(slot)]) : slot;
    current_->read(w * T, T + 1, window.data());
    if (options_.vocab_size > 0) {
      for (int64_t k = 0; k <= T; ++k) {
        TESSERA_CHECK(window[size_t(k)] < options_.vocab_size, "data loader: shard ",
                      current_->path(), ": token ", w * T + k, " at byte offset ",
                      kShardHeaderBytes + (w * T + k) * width, " is ", window[size_t(k)],
                      ", expected an id below the vocab size ", options_.vocab_size);
      }
    }
    std::copy(window.begin(), window.end() - 1, inputs + b * T);
    std::copy(window.begin() + 1, window.end(), targets + b * T);
  }

  if (++batch_pos_ == shards_[size_t(shard_at(shard_pos_))].num_batches) {
    batch_pos_ = 0;
    if (++shard_pos_ == int64_t(shards_.size())) {
      shard_pos_ = 0;
      ++epoch_;
      start_epoch();
    }
  }
  return batch;
}

LoaderState DataLoader::state() const {
  LoaderState s;
  s.seed = options_.seed;
  s.epoch = epoch_;
  s.shard = shard_pos_;
  s.batch = batch_pos_;
  s.batch_size = options_.batch_size;
  s.seq_len = options_.seq_len;
  s.world_size = options_.world_size;
  s.shuffle = options_.shuffle;
  s.num_shards = int64_t(shards_.size());
  s.num_tokens = num_tokens_;
  return s;
}

void DataLoader::restore(const LoaderState& s) {
  // The global step (windows per step over every rank) fixes the order; how it is split over
  // ranks does not, so a state restores under any number of ranks that splits the same step.
  check_same("batch_size * world_size (windows per global step)", s.batch_size * s.world_size,
             options_.batch_size * options_.world_size);
  check_same("seq_len", s.seq_len, options_.seq_len);
  check_same("shuffle", s.shuffle, options_.shuffle);
  check_same("num_shards", s.num_shards, int64_t(shards_.size()));
  check_same("num_tokens", s.num_tokens, num_tokens_);
  TESSERA_CHECK(s.shard >= 0 && s.shard < int64_t(shards_.size()), "loader state: shard ", s.shard,
                " is not in [0, ", shards_.size(), ")");
  TESSERA_CHECK(s.epoch >= 0, "loader state: epoch ", s.epoch, " is negative");
  std::vector<uint32_t> order = shard_order(s.seed, s.epoch);
  int64_t batches = shards_[order[size_t(s.shard)]].num_batches;
  TESSERA_CHECK(s.batch >= 0 && s.batch < batches, "loader state: batch ", s.batch,
                " is not in [0, ", batches, ") for shard position ", s.shard);
  // Validated; only now does the loader move.
  options_.seed = s.seed;
  epoch_ = s.epoch;
  start_epoch();
  shard_pos_ = s.shard;
  batch_pos_ = s.batch;
}

void DataLoader::reset() {
  epoch_ = 0;
  shard_pos_ = 0;
  batch_pos_ = 0;
  start_epoch();
}

}  // namespace tessera::data
