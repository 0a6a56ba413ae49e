// Node-local checkpoints: exact round trips, two sets kept, and the sets a rank must refuse
// (another fingerprint, a flipped or truncated file, a save cut short).

#include <gtest/gtest.h>

#include <filesystem>

#include "tessera/nn/io/checkpoint.h"
#include "tessera/nn/io/local_checkpoint.h"
#include "tessera/tessera.h"
#include "tests/nn/io_test_util.h"

namespace tessera::nn {
namespace {

namespace fs = std::filesystem;
using testing::mentions;
using testing::read_bytes;
using testing::same_tensor;
using testing::TempDir;
using testing::write_bytes;

const nlohmann::json kPrint = {{"rank", 1}, {"ranks", 2}, {"host", "a"}, {"layout", {{"layout", "dp2"}}}};

StateDict tensors(int64_t step) {
  Generator gen{uint64_t(step)};
  return {{"master.0", randn({37}, gen)}, {"exp_avg.0", randn({5, 3}, gen, DType::bf16)}};
}

std::string set_dir(const TempDir& d, int64_t step) {
  return (fs::path(local_rank_dir(d.path(), 1)) / checkpoint_name(step)).string();
}

TEST(LocalCheckpoint, RoundTripsAndKeepsTheNewestTwo) {
  TempDir d;
  const std::string rank = local_rank_dir(d.path(), 1);
  for (int64_t step : {2, 4, 6})
    save_local_checkpoint(rank, step, tensors(step), kPrint, {{"loader", step}});
  std::string why;
  EXPECT_EQ(usable_local_checkpoints(rank, kPrint, &why), (std::vector<int64_t>{6, 4}));
  EXPECT_TRUE(why.empty()) << why;
  EXPECT_FALSE(fs::exists(set_dir(d, 2)));
  const LocalCheckpoint back = load_local_checkpoint(rank, 4, kPrint);
  EXPECT_EQ(back.step, 4);
  EXPECT_EQ(back.state, (nlohmann::json{{"loader", 4}}));
  ASSERT_EQ(back.tensors.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(back.tensors[i].first, tensors(4)[i].first);
    EXPECT_TRUE(same_tensor(back.tensors[i].second, tensors(4)[i].second));
  }
  // A resumed run saving an earlier step drops the sets of the history it left.
  save_local_checkpoint(rank, 3, tensors(3), kPrint, nlohmann::json::object());
  EXPECT_EQ(usable_local_checkpoints(rank, kPrint, &why), (std::vector<int64_t>{3}));
}

// The reader takes an object: a null state is written as {} and reads back, anything else is
// refused before a byte is written (it would make a set the reader refuses).
TEST(LocalCheckpoint, StateIsAnObject) {
  TempDir d;
  const std::string rank = local_rank_dir(d.path(), 1);
  save_local_checkpoint(rank, 2, tensors(2), kPrint, nlohmann::json());
  EXPECT_EQ(load_local_checkpoint(rank, 2, kPrint).state, nlohmann::json::object());
  for (const nlohmann::json& bad : {nlohmann::json::array({1, 2}), nlohmann::json(7)}) {
    try {
      save_local_checkpoint(rank, 4, tensors(4), kPrint, bad);
      ADD_FAILURE() << "state " << bad.dump() << " was written";
    } catch (const Error& e) {
      EXPECT_TRUE(mentions(e.what(), {"state must be a JSON object", "step 4"}));
    }
    EXPECT_FALSE(fs::exists(set_dir(d, 4))) << bad.dump();
  }
  std::string why;
  EXPECT_EQ(usable_local_checkpoints(rank, kPrint, &why), (std::vector<int64_t>{2}));
}

TEST(LocalCheckpoint, RefusesAnotherFingerprint) {
  TempDir d;
  const std::string rank = local_rank_dir(d.path(), 1);
  save_local_checkpoint(rank, 2, tensors(2), kPrint, nlohmann::json::object());
  nlohmann::json other = kPrint;
  other["layout"]["layout"] = "tp2";
  other["host"] = "b";
  std::string why;
  EXPECT_TRUE(usable_local_checkpoints(rank, other, &why).empty());
  EXPECT_TRUE(mentions(why, {"step_00000002/meta.json", "written by another rank, layout or host",
                             "layout \"dp2\" (now \"tp2\")", "host \"a\" (now \"b\")"}));
}

TEST(LocalCheckpoint, RefusesDamagedAndUnfinishedSets) {
  TempDir d;
  const std::string rank = local_rank_dir(d.path(), 1);
  save_local_checkpoint(rank, 2, tensors(2), kPrint, nlohmann::json::object());
  save_local_checkpoint(rank, 4, tensors(4), kPrint, nlohmann::json::object());
  const std::string file = set_dir(d, 4) + "/state.safetensors";
  std::string bytes = read_bytes(file);
  bytes[bytes.size() - 2] ^= 0x01;
  write_bytes(file, bytes);
  std::string why;
  EXPECT_EQ(usable_local_checkpoints(rank, kPrint, &why), (std::vector<int64_t>{2}));
  EXPECT_TRUE(mentions(why, {file, "checksum", "corrupt"}));

  fs::resize_file(file, 10);
  EXPECT_EQ(usable_local_checkpoints(rank, kPrint, &why), (std::vector<int64_t>{2}));
  EXPECT_TRUE(mentions(why, {file, "truncated"}));

  fs::remove(set_dir(d, 2) + "/meta.json");  // a save cut short
  EXPECT_TRUE(usable_local_checkpoints(rank, kPrint, &why).empty());
  EXPECT_TRUE(mentions(why, {"step_00000002: no meta.json (its save did not finish)"}));
  EXPECT_TRUE(usable_local_checkpoints(local_rank_dir(d.path(), 7), kPrint, &why).empty());
  EXPECT_TRUE(mentions(why, {"no local checkpoint in"}));
}

}  // namespace
}  // namespace tessera::nn
