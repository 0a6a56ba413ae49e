// Sharded checkpoints: the geometry of tensor-parallel slices against nn::shard_of (the
// slicing the layouts use), exact reassembly of sets cut every way, and the sets resume must
// refuse: no manifest, a missing, truncated or flipped shard, a piece covering an element twice
// or leaving one uncovered, a shard from another save.

#include <gtest/gtest.h>

#include <malloc.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tessera/core/file_io.h"
#include "tessera/nn/init.h"
#include "tessera/nn/io/sharded_checkpoint.h"
#include "tessera/tessera.h"
#include "tests/nn/io_test_util.h"

namespace tessera::nn {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::expect_same_dict;
using testing::flip_a_data_bit;
using testing::mentions;
using testing::read_bytes;
using testing::same_tensor;
using testing::TempDir;
using testing::write_bytes;

CheckpointData sample(int64_t step) {
  Generator gen(uint64_t(step) + 7);
  CheckpointData d;
  d.step = step;
  // Odd sizes, so that no split over 3 ranks is even; a bf16 tensor, an empty one.
  d.model = {{"wte.weight", randn({13, 5}, gen)},
             {"h.0.ln_1.weight", randn({7}, gen, DType::bf16)},
             {"empty", randn({0, 3}, gen)}};
  d.optimizer = {{"wte.weight.exp_avg", randn({13, 5}, gen)},
                 {"wte.weight", rand({3}, gen)}};  // an optimizer name equal to a model name
  d.state = {{"optimizer", {{"lr", 3e-4 / 7.0}, {"kind", "adamw"}}}, {"loader", {{"pos", step}}}};
  return d;
}

std::string set_of(const TempDir& run, int64_t step) {
  return (fs::path(checkpoints_dir(run.path())) / checkpoint_name(step)).string();
}

nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(read_bytes(path));
}
void write_json(const std::string& path, const nlohmann::json& j) {
  write_bytes(path, j.dump());
}

TEST(ShardedCheckpoint, ReplicatedSetsRoundTripExactlyForAnyRankCount) {
  for (int ranks : {1, 2, 3, 5, 70}) {  // 70 > every tensor's size: some ranks hold nothing
    TempDir run;
    const CheckpointData d = sample(12);
    save_sharded_checkpoint(run.path(), d, ranks);
    EXPECT_TRUE(is_sharded_checkpoint(set_of(run, 12)));
    const CheckpointData back = load_checkpoint(set_of(run, 12));  // dispatches on the manifest
    EXPECT_EQ(back.step, 12);
    EXPECT_EQ(back.state, d.state);
    expect_same_dict(back.model, d.model);
    expect_same_dict(back.optimizer, d.optimizer);
    EXPECT_EQ(find_latest_checkpoint(run.path()).value(), set_of(run, 12)) << ranks;
  }
}

TEST(ShardedCheckpoint, TheModelPartReadsNoOptimizerTensor) {
  TempDir run;
  const CheckpointData d = sample(5);
  save_sharded_checkpoint(run.path(), d, 3);
  const CheckpointData back = load_checkpoint(set_of(run, 5), CheckpointParts::model);
  expect_same_dict(back.model, d.model);
  EXPECT_TRUE(back.optimizer.empty());
  EXPECT_EQ(back.state, d.state);
}

// Every tensor-parallel geometry the layouts use: rows or columns, one segment or c_attn's
// three, and vocabulary padding. The pieces of each rank's slice, cut at odd flat offsets,
// must map every element to where nn::shard_of took it from, skip the padding, and together
// cover the full tensor exactly once.
TEST(ShardedCheckpoint, PieceRunsInvertShardOf) {
  struct Case {
    Shape full;
    ShardKind kind;
    std::vector<int64_t> segments;
    int64_t unpadded;
    int tp;
  };
  const std::vector<Case> cases = {
      {{12, 5}, ShardKind::rows, {}, -1, 2},
      {{5, 12}, ShardKind::cols, {}, -1, 3},
      {{24, 3}, ShardKind::rows, {12, 6, 6}, -1, 2},  // c_attn: q, k, v heads per rank
      {{3, 24}, ShardKind::cols, {12, 6, 6}, -1, 3},
      {{11, 4}, ShardKind::rows, {16}, 11, 4},  // a vocabulary of 11 padded to 16
      {{10}, ShardKind::rows, {}, -1, 2},       // a bias
  };
  Generator gen(3);
  for (const Case& c : cases) {
    const Tensor full = randn(c.full, gen);
    ParamMeta meta;
    meta.shard = c.kind;
    meta.segments = c.segments;
    meta.unpadded_size = c.unpadded;
    std::vector<int> hits(size_t(full.numel()), 0);
    const float* f = full.data<float>();
    for (int r = 0; r < c.tp; ++r) {
      const Tensor local = shard_of(full, meta, r, c.tp, "case");
      ShardGeometry g;
      g.local_shape = local.shape();
      g.split_dim = c.kind == ShardKind::rows ? 0 : 1;
      g.segments = c.segments;
      g.tp_rank = r;
      g.tp_size = c.tp;
      const float* l = local.data<float>();
      std::vector<bool> mapped(size_t(local.numel()), false);
      const int64_t n = local.numel(), cut1 = n / 3 + 1, cut2 = 2 * n / 3 + 1;
      for (auto [begin, end] : {std::pair{int64_t(0), cut1}, {cut1, cut2}, {cut2, n}}) {
        for (const PieceRun& run : piece_runs(g, c.full, begin, end - begin, "case")) {
          for (int64_t i = 0; i < run.length; ++i) {
            const int64_t li = begin + run.piece_offset + i, fi = run.full_offset + i;
            ASSERT_LT(fi, full.numel());
            EXPECT_EQ(l[li], f[fi]) << c.full.to_string() << " rank " << r << " local " << li;
            mapped[size_t(li)] = true;
            ++hits[size_t(fi)];
          }
        }
      }
      for (int64_t i = 0; i < n; ++i)
        if (!mapped[size_t(i)]) {
          EXPECT_EQ(l[i], 0.0f) << "an unmapped element is not padding";
        }
    }
    for (size_t i = 0; i < hits.size(); ++i)
      ASSERT_EQ(hits[i], 1) << c.full.to_string() << " element " << i;
  }
}

// Writes rank `rank` of `ranks`' shard of step `step`, holding one piece of tensor "w" (rank 0
// publishes the set, so it writes last).
void write_w_shard(const TempDir& run, int64_t step, int rank, int ranks, const std::string& nonce,
                   const Shape& full_shape, const ShardGeometry& geometry, int64_t begin,
                   const Tensor& data) {
  ShardJob job;
  job.run_dir = run.path();
  job.step = step;
  job.rank = rank;
  job.ranks = ranks;
  job.nonce = nonce;
  ShardPiece p;
  p.name = "w";
  p.full_shape = full_shape;
  p.geometry = geometry;
  p.begin = begin;
  p.data = data;
  job.pieces = {p};
  job.state = {{"loader", 1}};
  write_shard(job);
}

// A set as a dp2 x tp2 layout writes one: each tp rank's slice split by flat range between its
// two dp ranks, published by rank 0 after the other three.
TEST(ShardedCheckpoint, TensorParallelSlicesReassembleTheFullTensor) {
  TempDir run;
  Generator gen(5);
  const Tensor full = randn({11, 6}, gen);  // padded to 12 rows over tp2
  ParamMeta meta;
  meta.shard = ShardKind::rows;
  meta.segments = {12};
  meta.unpadded_size = 11;
  const std::string nonce = checkpoint_nonce(42);
  for (int world = 3; world >= 0; --world) {
    const int tp_rank = world % 2, dp_rank = world / 2;
    const Tensor local = shard_of(full, meta, tp_rank, 2, "w");
    const int64_t n = local.numel(), lo = n * dp_rank / 2, hi = n * (dp_rank + 1) / 2;
    write_w_shard(run, 3, world, 4, nonce, full.shape(), {local.shape(), 0, {12}, tp_rank, 2}, lo,
                  ops::narrow(ops::reshape(local, Shape{n}), 0, lo, hi - lo));
  }
  const CheckpointData back = load_checkpoint(set_of(run, 3));
  ASSERT_EQ(back.model.size(), 1u);
  EXPECT_TRUE(same_tensor(back.model[0].second, full));
  EXPECT_TRUE(back.optimizer.empty());
}

TEST(ShardedCheckpoint, AnIncompleteSetIsSkippedForThePreviousOne) {
  TempDir run;
  save_sharded_checkpoint(run.path(), sample(2), 3);
  save_sharded_checkpoint(run.path(), sample(4), 3);
  fs::remove(fs::path(set_of(run, 4)) / kShardedManifestFile);  // a save that never published
  EXPECT_TRUE(mentions(error_of([&] { load_checkpoint(set_of(run, 4)); }),
                       {set_of(run, 4), "no manifest.json (its save did not finish)"}));
  std::vector<SkippedCheckpoint> skipped;
  const auto loaded = load_newest_good_checkpoint(run.path(), &skipped);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->data.step, 2);
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_TRUE(mentions(skipped[0].reason, {"no manifest.json"}));
}

TEST(ShardedCheckpoint, DamagedShardsAreNamed) {
  const std::string shard1 = "shard_00001.safetensors";
  struct Damage {
    const char* what;
    std::function<void(const std::string&)> apply;
    std::vector<std::string> expected;
  };
  const std::vector<Damage> damages = {
      {"missing",
       [&](const std::string& d) { fs::remove(fs::path(d) / shard1); },
       {shard1, "missing (listed in"}},
      {"truncated",
       [&](const std::string& d) {
         const fs::path p = fs::path(d) / shard1;
         fs::resize_file(p, fs::file_size(p) - 1);
       },
       {shard1, "truncated or replaced"}},
      {"bit flip",
       [&](const std::string& d) { flip_a_data_bit((fs::path(d) / shard1).string()); },
       {shard1, "checksum", "corrupt or from another checkpoint"}},
  };
  for (const Damage& damage : damages) {
    TempDir run;
    save_sharded_checkpoint(run.path(), sample(2), 2);
    save_sharded_checkpoint(run.path(), sample(4), 3);
    damage.apply(set_of(run, 4));
    const std::string e = error_of([&] { load_checkpoint(set_of(run, 4)); });
    for (const std::string& fragment : damage.expected)
      EXPECT_TRUE(mentions(e, {fragment})) << damage.what;
    std::vector<SkippedCheckpoint> skipped;
    EXPECT_EQ(load_newest_good_checkpoint(run.path(), &skipped)->data.step, 2) << damage.what;
    EXPECT_EQ(skipped.size(), 1u) << damage.what;
  }
}

// The opened set holds one record per piece, not one per run. A [65536, 4] tensor split along
// its columns over tp2 is 131,072 runs (a row of each slice), which the index used to keep for
// the life of the set on every rank: 4 MiB of 32-byte records here, and by the format's arithmetic
// about 1 GB for a 70B Llama's weights and moments at tp8. The heap the open set holds (glibc's
// live bytes, mallinfo2) is bounded by 256 KiB, for its strings, state and pieces; with the runs
// kept, as before, it holds 4.2 MB and fails. The set still reads back exactly, by tensor and by
// piece.
TEST(ShardedCheckpoint, AnOpenSetHoldsItsPiecesNotTheirRuns) {
  TempDir run;
  Generator gen(11);
  const int64_t rows = 65536;
  const Tensor full = randn({rows, 4}, gen);
  const std::string nonce = checkpoint_nonce(7);
  for (int tp_rank = 1; tp_rank >= 0; --tp_rank) {  // rank 0 publishes the set last
    const Tensor local = ops::contiguous(ops::narrow(full, 1, 2 * tp_rank, 2));
    write_w_shard(run, 5, tp_rank, 2, nonce, full.shape(), {local.shape(), 1, {4}, tp_rank, 2}, 0,
                  ops::reshape(local, Shape{local.numel()}));
  }
  const size_t before = mallinfo2().uordblks;
  const ShardedSet set = open_sharded_checkpoint(set_of(run, 5));
  const size_t held = mallinfo2().uordblks - before;
  std::printf("  the open set holds %zu bytes of heap\n", held);
  EXPECT_LE(held, size_t(256) << 10) << "bytes of heap the open set holds";
  ASSERT_EQ(set.tensors.size(), 1u);
  EXPECT_EQ(set.tensors[0].pieces.size(), 2u);
  EXPECT_TRUE(same_tensor(read_sharded_checkpoint(set).model[0].second, full));
  // Rank 1's quarter of the rows, as a layout splitting the other way (rows over tp4) asks.
  ShardPiece slice;
  slice.name = "w";
  slice.full_shape = full.shape();
  slice.geometry = {Shape{rows / 4, 4}, 0, {rows}, 1, 4};
  slice.data = empty(Shape{rows}, DType::f32);
  std::vector<ShardPiece> wanted = {slice};
  read_pieces(set, wanted);
  EXPECT_TRUE(same_tensor(ops::reshape(wanted[0].data, Shape{rows / 4, 4}),
                          ops::narrow(full, 0, rows / 4, rows / 4)));
}

// A ChecksumShare checks the shards it covers (shard i when i % ranks == rank) and only their
// sizes, indices and tiling otherwise: with shard 1 of 3 flipped, ranks 0 and 2 of three open
// the set and rank 1 names the shard; over two ranks rank 1 covers it too, rank 0 does not.
TEST(ShardedCheckpoint, AChecksumShareChecksOnlyItsShards) {
  TempDir run;
  save_sharded_checkpoint(run.path(), sample(4), 3);
  const std::string shard1 = (fs::path(set_of(run, 4)) / "shard_00001.safetensors").string();
  flip_a_data_bit(shard1);
  EXPECT_EQ(open_sharded_checkpoint(set_of(run, 4), {0, 3}).step, 4);
  EXPECT_EQ(open_sharded_checkpoint(set_of(run, 4), {2, 3}).step, 4);
  EXPECT_EQ(open_sharded_checkpoint(set_of(run, 4), {0, 2}).step, 4);
  for (const ChecksumShare share : {ChecksumShare{1, 3}, ChecksumShare{1, 2}, ChecksumShare{}})
    EXPECT_TRUE(mentions(error_of([&] { open_sharded_checkpoint(set_of(run, 4), share); }),
                         {shard1, "checksum", "corrupt or from another checkpoint"}))
        << share.rank << " of " << share.ranks;
  fs::resize_file(shard1, fs::file_size(shard1) - 1);
  EXPECT_TRUE(mentions(error_of([&] {
                         open_sharded_checkpoint(set_of(run, 4), {0, 3});
                       }),
                       {shard1, "truncated or replaced"}));
}

// A manifest whose pieces do not tile their tensors: moved so that an element is covered twice,
// dropped so that elements are never covered, or claiming a tensor larger than its pieces.
TEST(ShardedCheckpoint, PiecesMustCoverEveryElementOnce) {
  TempDir run;
  save_sharded_checkpoint(run.path(), sample(6), 2);
  const std::string manifest = (fs::path(set_of(run, 6)) / kShardedManifestFile).string();
  const nlohmann::json good = read_json(manifest);
  auto piece_of = [](nlohmann::json& m, int shard, const std::string& name) -> nlohmann::json& {
    for (nlohmann::json& p : m["shards"][shard]["pieces"])
      if (p["name"] == name && !p["optimizer"].get<bool>()) return p;
    throw std::runtime_error("no piece " + name);
  };

  nlohmann::json m = good;
  piece_of(m, 1, "wte.weight")["begin"] = 0;  // rank 1's half over rank 0's
  write_json(manifest, m);
  EXPECT_TRUE(mentions(error_of([&] { load_checkpoint(set_of(run, 6)); }),
                       {"shard_00001.safetensors", "'wte.weight'", "covered twice"}));

  m = good;
  piece_of(m, 1, "wte.weight")["full_shape"] = {13, 5, 2};
  piece_of(m, 0, "wte.weight")["full_shape"] = {13, 5, 2};
  write_json(manifest, m);
  EXPECT_TRUE(mentions(error_of([&] { load_checkpoint(set_of(run, 6)); }),
                       {"'wte.weight'", "more elements than all its pieces"}));

  m = good;
  for (nlohmann::json& s : m["shards"]) s["pieces"] = nlohmann::json::array();
  write_json(manifest, m);
  EXPECT_TRUE(mentions(error_of([&] { load_checkpoint(set_of(run, 6)); }),
                       {"shard_00000.safetensors", "holds", "tensors but"}));

  m = good;  // a piece past the end of its shard's local tensor
  piece_of(m, 1, "wte.weight")["begin"] = 60;
  write_json(manifest, m);
  EXPECT_TRUE(mentions(error_of([&] { load_checkpoint(set_of(run, 6)); }),
                       {"shard_00001.safetensors", "'wte.weight'", "piece ["}));

  m = good;
  piece_of(m, 0, "wte.weight")["full_shape"] = {1099511627776, 1099511627776};
  write_json(manifest, m);
  EXPECT_TRUE(
      mentions(error_of([&] { load_checkpoint(set_of(run, 6)); }), {"more than 2^40 elements"}));
}

// Rank 0 publishes only shards of its own save: one left by an earlier save of the same step
// (another nonce) is not taken, and a save whose shards never come fails in one line.
TEST(ShardedCheckpoint, RankZeroWaitsForThisSavesShardsOnly) {
  TempDir run;
  save_sharded_checkpoint(run.path(), sample(8), 2);  // leaves rank 1's index of another nonce
  begin_sharded_save(run.path(), 8);
  EXPECT_FALSE(fs::exists(fs::path(set_of(run, 8)) / kShardedManifestFile));
  ShardJob job;
  job.run_dir = run.path();
  job.step = 8;
  job.ranks = 2;
  job.nonce = checkpoint_nonce(7);
  job.pieces = replicated_pieces(sample(8).model, false, 0, 2);
  job.publish_timeout = 0.2;
  EXPECT_TRUE(mentions(
      error_of([&] { write_shard(job); }),
      {"sharded save of step 8", "1 of 2 ranks' shards", "rank 1", "did not appear within 0.2 s"}));
  EXPECT_FALSE(fs::exists(fs::path(set_of(run, 8)) / kShardedManifestFile));
}

}  // namespace
}  // namespace tessera::nn
