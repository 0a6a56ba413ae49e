#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/data_test_util.h"
#include "tessera/core/ops/creation.h"
#include "tessera/data/loader.h"

namespace tessera::data {
namespace {

using testing::expect_error;
using testing::TempDir;

// Shard s holds tokens s*1000 + i, so a token names its shard and position.
std::vector<std::string> make_shards(const TempDir& dir, const std::vector<int>& sizes) {
  std::vector<std::string> paths;
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<int32_t> tokens(size_t(sizes[s]));
    for (int i = 0; i < sizes[s]; ++i) tokens[size_t(i)] = int32_t(s * 1000 + size_t(i));
    std::string path = dir.file("shard_" + std::to_string(s) + ".bin");
    write_shard(path, tokens, TokenDType::u16);
    paths.push_back(path);
  }
  return paths;
}

std::vector<int64_t> values(const Tensor& t) {
  return to_vector<int64_t>(t);
}

// The first token of each row: the window's identity.
std::vector<int64_t> row_starts(const Batch& b) {
  std::vector<int64_t> in = values(b.inputs);
  int64_t T = b.inputs.size(1);
  std::vector<int64_t> starts;
  for (int64_t r = 0; r < b.inputs.size(0); ++r) starts.push_back(in[size_t(r * T)]);
  return starts;
}

void expect_same_batch(const Batch& a, const Batch& b) {
  EXPECT_EQ(values(a.inputs), values(b.inputs));
  EXPECT_EQ(values(a.targets), values(b.targets));
}

TEST(DataLoader, SequentialModeMatchesLlmc) {
  TempDir dir;
  auto paths = make_shards(dir, {30});
  LoaderOptions o;
  o.batch_size = 2;
  o.seq_len = 4;
  o.shuffle = false;
  DataLoader loader(paths, o);
  // (30 - 1) / 4 = 7 windows, 3 batches of 2; the 7th window is skipped as in llm.c.
  EXPECT_EQ(loader.batches_per_epoch(), 3);
  Batch b = loader.next();
  EXPECT_EQ(b.inputs.shape(), (Shape{2, 4}));
  EXPECT_EQ(b.inputs.dtype(), DType::i64);
  EXPECT_EQ(values(b.inputs), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(values(b.targets), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(values(loader.next().inputs), (std::vector<int64_t>{8, 9, 10, 11, 12, 13, 14, 15}));
  Batch third = loader.next();
  EXPECT_EQ(values(third.targets), (std::vector<int64_t>{17, 18, 19, 20, 21, 22, 23, 24}));
  EXPECT_EQ(loader.epoch(), 1);
  EXPECT_EQ(values(loader.next().inputs)[0], 0);  // the next epoch starts over
}

TEST(DataLoader, SequentialRanksReadLlmcOffsets) {
  TempDir dir;
  auto paths = make_shards(dir, {60});
  for (int64_t rank = 0; rank < 3; ++rank) {
    LoaderOptions o;
    o.batch_size = 2;
    o.seq_len = 3;
    o.shuffle = false;
    o.rank = rank;
    o.world_size = 3;
    DataLoader loader(paths, o);
    EXPECT_EQ(loader.batches_per_epoch(), 3);  // 59 / 3 = 19 windows, steps of 6
    for (int64_t step = 0; step < 3; ++step) {
      // llm.c: offset = step * world*B*T + rank * B*T, then B*T+1 contiguous tokens.
      int64_t offset = step * 3 * 2 * 3 + rank * 2 * 3;
      std::vector<int64_t> in = values(loader.next().inputs);
      for (size_t k = 0; k < in.size(); ++k) EXPECT_EQ(in[k], offset + int64_t(k));
    }
  }
}

TEST(DataLoader, ShuffleIsDeterministicAndCoversEveryWindowOncePerEpoch) {
  TempDir dir;
  // Windows per shard: 12, 8, 16 (T = 5); B = 2 divides them all, so every window is used.
  auto paths = make_shards(dir, {61, 41, 81});
  LoaderOptions o;
  o.batch_size = 2;
  o.seq_len = 5;
  o.seed = 7;
  DataLoader a(paths, o), b(paths, o);
  ASSERT_EQ(a.batches_per_epoch(), 18);
  std::vector<std::vector<int64_t>> epochs(3);
  for (int e = 0; e < 3; ++e) {
    for (int i = 0; i < 18; ++i) {
      Batch x = a.next(), y = b.next();
      expect_same_batch(x, y);
      std::vector<int64_t> in = values(x.inputs), tg = values(x.targets);
      // Targets are the inputs shifted by one within each window.
      for (int r = 0; r < 2; ++r) {
        for (int k = 0; k + 1 < 5; ++k) EXPECT_EQ(tg[size_t(r * 5 + k)], in[size_t(r * 5 + k + 1)]);
        EXPECT_EQ(tg[size_t(r * 5 + 4)], in[size_t(r * 5 + 4)] + 1);
      }
      for (int64_t s : row_starts(x)) epochs[size_t(e)].push_back(s);
    }
  }
  std::vector<int64_t> all;
  for (int s = 0; s < 3; ++s) {
    int windows = (std::vector<int>{12, 8, 16})[size_t(s)];
    for (int w = 0; w < windows; ++w) all.push_back(s * 1000 + w * 5);
  }
  std::sort(all.begin(), all.end());
  for (const auto& epoch : epochs) {
    std::vector<int64_t> sorted = epoch;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, all);
  }
  EXPECT_NE(epochs[0], epochs[1]);  // reshuffled per epoch
  std::vector<int64_t> in_order = all;
  EXPECT_NE(epochs[0], in_order);

  LoaderOptions other = o;
  other.seed = 8;
  DataLoader c(paths, other);
  DataLoader d(paths, o);
  EXPECT_NE(values(c.next().inputs), values(d.next().inputs));
}

TEST(DataLoader, RanksReadDisjointWindows) {
  TempDir dir;
  auto paths = make_shards(dir, {97, 73});
  const int world = 3;
  std::vector<DataLoader> loaders;
  for (int r = 0; r < world; ++r) {
    LoaderOptions o;
    o.batch_size = 2;
    o.seq_len = 4;
    o.seed = 99;
    o.rank = r;
    o.world_size = world;
    loaders.emplace_back(paths, o);
  }
  // Shard windows 24 and 18: 4 + 3 global steps of 6 windows per epoch.
  ASSERT_EQ(loaders[0].batches_per_epoch(), 7);
  std::set<int64_t> seen;
  for (int step = 0; step < 7; ++step) {
    for (auto& l : loaders) {
      for (int64_t s : row_starts(l.next())) EXPECT_TRUE(seen.insert(s).second) << s;
    }
  }
  EXPECT_EQ(seen.size(), 42u);
}

// Runs `total` batches uninterrupted; then for each split point, a fresh loader restored from the
// state taken there must produce exactly the rest.
void check_resume(const std::vector<std::string>& paths, const LoaderOptions& o, int total) {
  DataLoader reference(paths, o);
  std::vector<Batch> expected;
  std::vector<nlohmann::json> states;
  for (int i = 0; i < total; ++i) {
    states.push_back(reference.state().to_json());
    expected.push_back(reference.next());
  }
  for (int split : {0, 1, 5, 11, total - 1}) {
    // Through text, as a checkpoint stores it.
    LoaderState state = LoaderState::from_json(nlohmann::json::parse(states[size_t(split)].dump()));
    LoaderOptions fresh = o;
    fresh.seed = 12345;  // the state's seed wins
    DataLoader resumed(paths, fresh);
    resumed.restore(state);
    for (int i = split; i < total; ++i) expect_same_batch(resumed.next(), expected[size_t(i)]);
  }
}

TEST(DataLoader, ResumesBitForBit) {
  TempDir dir;
  auto paths = make_shards(dir, {61, 41, 81});
  LoaderOptions o;
  o.batch_size = 2;
  o.seq_len = 5;
  o.seed = 3;
  check_resume(paths, o, 45);  // 2.5 epochs
  o.rank = 1;
  o.world_size = 2;
  check_resume(paths, o, 30);
  o.shuffle = false;
  check_resume(paths, o, 30);
}

TEST(DataLoader, ResetStartsOver) {
  TempDir dir;
  auto paths = make_shards(dir, {41, 41});
  LoaderOptions o;
  o.batch_size = 1;
  o.seq_len = 4;
  DataLoader loader(paths, o);
  Batch first = loader.next();
  for (int i = 0; i < 25; ++i) loader.next();
  loader.reset();
  EXPECT_EQ(loader.epoch(), 0);
  expect_same_batch(loader.next(), first);
}

TEST(DataLoader, RestoreRejectsAMismatchedState) {
  TempDir dir;
  auto paths = make_shards(dir, {61, 41});
  LoaderOptions o;
  o.batch_size = 2;
  o.seq_len = 5;
  DataLoader loader(paths, o);
  LoaderState s = loader.state();
  LoaderOptions other = o;
  other.batch_size = 4;
  DataLoader different(paths, other);
  expect_error([&] { different.restore(s); },
               {"batch_size * world_size (windows per global step) is 2 in the state but 4"});
  // Another split of the same global step restores: 2 ranks of 1 window each.
  LoaderOptions split = o;
  split.batch_size = 1;
  split.world_size = 2;
  split.rank = 1;
  DataLoader rank1(paths, split);
  rank1.restore(s);
  LoaderState bad = s;
  bad.shard = 2;
  expect_error([&] { loader.restore(bad); }, {"shard 2 is not in [0, 2)"});
  bad = s;
  bad.batch = 100;
  expect_error([&] { loader.restore(bad); }, {"batch 100 is not in"});
  bad = s;
  bad.num_tokens = 5;
  expect_error([&] { loader.restore(bad); }, {"num_tokens"});
  // A failed restore leaves the loader where it was.
  DataLoader fresh(paths, o);
  expect_same_batch(loader.next(), fresh.next());

  nlohmann::json j = s.to_json();
  j.erase("epoch");
  expect_error([&] { LoaderState::from_json(j); }, {"missing field 'epoch'"});
  j = s.to_json();
  j["batch"] = "three";
  expect_error([&] { LoaderState::from_json(j); }, {"'batch' must be an integer"});
  j = s.to_json();
  j["shard"] = -1;
  expect_error([&] { LoaderState::from_json(j); }, {"'shard' must be in [0, 2^63)"});
  expect_error([&] { LoaderState::from_json(nlohmann::json::array()); }, {"JSON object"});
}

TEST(DataLoader, RejectsShardsTooShortForOneBatch) {
  TempDir dir;
  auto paths = make_shards(dir, {61, 20});
  LoaderOptions o;
  o.batch_size = 2;
  o.seq_len = 10;  // a batch needs 21 tokens
  expect_error([&] { DataLoader l(paths, o); },
               {"shard_1.bin", "has 20 tokens", "world_size*B*T+1 = 1*2*10+1 = 21"});
  o.seq_len = 0;
  expect_error([&] { DataLoader l(paths, o); }, {"seq_len"});
  o.seq_len = 4;
  o.rank = 2;
  o.world_size = 2;
  expect_error([&] { DataLoader l(paths, o); }, {"rank 2"});
}

TEST(DataLoader, ChecksTokensAgainstVocab) {
  TempDir dir;
  auto paths = make_shards(dir, {1900});  // tokens 0..1899: 3 windows of 600
  LoaderOptions o;
  o.batch_size = 1;
  o.seq_len = 600;
  o.shuffle = false;
  o.vocab_size = 1000;
  DataLoader loader(paths, o);
  loader.next();  // tokens 0..600
  expect_error([&] { loader.next(); },
               {"shard_0.bin", "token 1000 at byte offset 3024 is 1000", "vocab size 1000"});
}

TEST(DataLoader, NoticesAShardReplacedUnderIt) {
  TempDir dir;
  auto paths = make_shards(dir, {41, 41});
  LoaderOptions o;
  o.batch_size = 1;
  o.seq_len = 4;
  o.shuffle = false;
  DataLoader loader(paths, o);
  write_shard(paths[0], std::vector<int32_t>(30), TokenDType::u16);
  expect_error([&] { loader.next(); }, {"shard_0.bin", "changed", "30 tokens now, 41 before"});
  std::filesystem::remove(paths[0]);
  expect_error([&] { loader.next(); }, {"shard_0.bin", "cannot open"});
}

TEST(DataLoader, ResolvesFoldersGlobsAndFiles) {
  TempDir dir;
  auto paths = make_shards(dir, {30, 30, 30});
  testing::write_bytes(dir.file("notes.txt"), "not a shard");
  EXPECT_EQ(resolve_shards(dir.path()), paths);
  EXPECT_EQ(resolve_shards(dir.file("shard_[12].bin")),
            (std::vector<std::string>{paths[1], paths[2]}));
  EXPECT_EQ(resolve_shards(paths[0]), std::vector<std::string>{paths[0]});
  expect_error([&] { resolve_shards(dir.file("nothing_*.bin")); }, {"no shard matches"});
  expect_error([&] { resolve_shards(dir.file("absent.bin")); }, {"absent.bin", "does not exist"});
  std::filesystem::create_directories(dir.file("split"));
  write_shard(dir.file("split/x_train_000000.bin"), std::vector<int32_t>(30), TokenDType::u16);
  write_shard(dir.file("split/x_val_000000.bin"), std::vector<int32_t>(30), TokenDType::u16);
  expect_error([&] { resolve_shards(dir.file("split")); },
               {"both training and validation", "split/*_train_*.bin"});
  EXPECT_EQ(resolve_shards(dir.file("split/*_val_*.bin")).size(), 1u);
  LoaderOptions o;
  o.batch_size = 1;
  o.seq_len = 4;
  DataLoader loader(dir.file("shard_*.bin"), o);
  EXPECT_EQ(loader.shard_paths(), paths);
  EXPECT_EQ(loader.num_tokens(), 90);
}

TEST(DataLoader, PhiloxPermutationIsAPureFunctionOfKey) {
  for (uint32_t n : {0u, 1u, 2u, 17u, 1000u}) {
    std::vector<uint32_t> p = philox_permutation(n, 42);
    EXPECT_EQ(p, philox_permutation(n, 42));
    std::vector<uint32_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    for (uint32_t i = 0; i < n; ++i) EXPECT_EQ(sorted[i], i);
  }
  EXPECT_NE(philox_permutation(1000, 42), philox_permutation(1000, 43));
}

}  // namespace
}  // namespace tessera::data
