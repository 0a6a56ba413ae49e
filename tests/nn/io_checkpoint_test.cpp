// Checkpoints: exact round trips, the `latest` pointer, retention, crashes simulated at each
// stage of a save, and corrupt or hostile checkpoint directories.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "tessera/nn/gpt_config.h"
#include "tessera/nn/io/checkpoint.h"
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
  Generator gen(uint64_t(step) + 1);
  CheckpointData d;
  d.step = step;
  d.model = {{"wte.weight", randn({16, 4}, gen)},
             {"h.0.ln_1.weight", randn({4}, gen, DType::bf16)}};
  d.optimizer = {{"exp_avg.wte.weight", randn({16, 4}, gen)},
                 {"exp_avg_sq.wte.weight", rand({16, 4}, gen)},
                 {"step", from_vector<int64_t>({step}, {1})}};
  d.state = {{"config", GPTConfig::preset("gpt2-tiny").to_json()},
             {"optimizer", {{"lr", 3e-4 / 7.0 * double(step)}, {"beta2", 0.95}}},
             {"rng", {{"seed", 18446744073709551615ull}, {"offset", 123456789012345ull}}},
             {"loader", {{"shard", 3}, {"position", 4096 + step}}},
             {"metadata", {{"note", "resumé"}}}};
  return d;
}

void expect_same(const CheckpointData& a, const CheckpointData& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.state, b.state);
  expect_same_dict(a.model, b.model);
  expect_same_dict(a.optimizer, b.optimizer);
}

std::string ckpt(const TempDir& run, int64_t step) {
  return (fs::path(checkpoints_dir(run.path())) / checkpoint_name(step)).string();
}

void edit_state(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  const std::string path = dir + "/state.json";
  nlohmann::json j = nlohmann::json::parse(read_bytes(path));
  edit(j);
  write_bytes(path, j.dump(2));
}

TEST(Checkpoint, RoundTripIsExact) {
  TempDir run;
  CheckpointData d = sample(42);
  const std::string dir = save_checkpoint(run.path(), d);
  EXPECT_EQ(dir, ckpt(run, 42));
  EXPECT_EQ(read_bytes(checkpoints_dir(run.path()) + "/latest"), "step_00000042\n");
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "state.json"})
    EXPECT_TRUE(fs::is_regular_file(dir + "/" + f)) << f;
  CheckpointData back = load_checkpoint(dir);
  expect_same(back, d);
  // uint64 RNG state and doubles come back exactly, not just approximately.
  EXPECT_EQ(back.state["rng"]["seed"].get<uint64_t>(), 18446744073709551615ull);
  EXPECT_EQ(back.state["optimizer"]["lr"].get<double>(), 3e-4 / 7.0 * 42.0);
  EXPECT_EQ(checkpoint_name(123456789), "step_123456789");
}

// Inference reads the model alone: the optimizer's file (twice the model under AdamW) is
// neither read nor checked, so a damaged one does not stop it, where a full load refuses.
TEST(Checkpoint, TheModelPartSkipsTheOptimizerFile) {
  TempDir run;
  const CheckpointData d = sample(7);
  const std::string dir = save_checkpoint(run.path(), d);
  write_bytes(dir + "/optimizer.safetensors", "not a tensor file");
  const CheckpointData model = load_checkpoint(dir, CheckpointParts::model);
  expect_same_dict(model.model, d.model);
  EXPECT_TRUE(model.optimizer.empty());
  EXPECT_EQ(model.state, d.state);
  EXPECT_TRUE(mentions(error_of([&] { load_checkpoint(dir); }), {"optimizer.safetensors"}));
  // Read straight into a model's tensors where name, shape and dtype match; a tensor that
  // does not match (here the wrong dtype) is read into a fresh one, left for the strict load
  // to refuse.
  const StateDict into = {{"wte.weight", zeros({16, 4})},
                          {"h.0.ln_1.weight", zeros({4}, DType::f32)}};
  const CheckpointData direct = load_checkpoint(dir, CheckpointParts::model, &into);
  expect_same_dict(direct.model, d.model);
  EXPECT_TRUE(find_tensor(direct.model, "wte.weight").is_same(into[0].second));
  EXPECT_TRUE(same_tensor(into[0].second, d.model[0].second));
  EXPECT_FALSE(find_tensor(direct.model, "h.0.ln_1.weight").is_same(into[1].second));
  // The model's own file is still checked.
  write_bytes(dir + "/model.safetensors", "not a tensor file");
  EXPECT_TRUE(mentions(error_of([&] { load_checkpoint(dir, CheckpointParts::model); }),
                       {"model.safetensors"}));
}

// model_checked checks the model file as a read does (size, checksum, the tensor list against
// state.json) and reads none of its tensors: a tensor-parallel rank reads its slices after.
TEST(Checkpoint, ModelCheckedChecksTheModelFileAndReadsNoTensor) {
  TempDir run;
  const CheckpointData d = sample(9);
  const std::string dir = save_checkpoint(run.path(), d);
  const CheckpointData checked = load_checkpoint(dir, CheckpointParts::model_checked);
  EXPECT_TRUE(checked.model.empty());
  EXPECT_TRUE(checked.optimizer.empty());
  EXPECT_EQ(checked.state, d.state);
  const std::string model = dir + "/model.safetensors";
  const std::string good = read_bytes(model);
  flip_a_data_bit(model);
  EXPECT_TRUE(mentions(error_of([&] { load_checkpoint(dir, CheckpointParts::model_checked); }),
                       {model, "checksum", "corrupt"}));
  write_bytes(model, good);
  edit_state(dir, [](auto& j) { j["files"]["model.safetensors"]["tensors"].erase(1); });
  EXPECT_TRUE(mentions(error_of([&] { load_checkpoint(dir, CheckpointParts::model_checked); }),
                       {model, "unexpected tensor 'h.0.ln_1.weight'"}));
}

// A ChecksumShare checks the files it covers (the model file is 0, the optimizer's 1) and
// passes over the others' checksums, never their sizes or tensor lists: the ranks of a job
// each check one share and then agree (train::open_checkpoint_together).
TEST(Checkpoint, AChecksumShareChecksOnlyTheFilesItCovers) {
  TempDir run;
  const std::string dir = save_checkpoint(run.path(), sample(5));
  const std::string optimizer = dir + "/optimizer.safetensors";
  flip_a_data_bit(optimizer);
  for (bool open_gathered : {false, true}) {
    EXPECT_EQ(open_checkpoint(dir, open_gathered, {0, 2}).data.step, 5) << open_gathered;
    EXPECT_TRUE(mentions(error_of([&] {
                           open_checkpoint(dir, open_gathered, {1, 2});
                         }),
                         {optimizer, "checksum", "corrupt"}))
        << open_gathered;
    EXPECT_TRUE(
        mentions(error_of([&] { open_checkpoint(dir, open_gathered); }), {optimizer, "checksum"}))
        << open_gathered;
    EXPECT_EQ(open_checkpoint(dir, open_gathered, {2, 3}).data.step, 5) << open_gathered;
  }
  // What the share leaves out is still checked for size.
  fs::resize_file(optimizer, fs::file_size(optimizer) - 1);
  EXPECT_TRUE(mentions(error_of([&] {
                         open_checkpoint(dir, true, {0, 2});
                       }),
                       {optimizer, "truncated or replaced"}));
}

TEST(Checkpoint, LatestFollowsTheNewestAndRetentionKeepsK) {
  TempDir run;
  EXPECT_EQ(find_latest_checkpoint(run.path()), std::nullopt) << "a new run has none";
  for (int64_t step = 1; step <= 5; ++step) save_checkpoint(run.path(), sample(step), /*keep=*/2);
  EXPECT_EQ(list_checkpoints(run.path()), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(find_latest_checkpoint(run.path()), ckpt(run, 5));
  expect_same(load_checkpoint(*find_latest_checkpoint(run.path())), sample(5));
}

TEST(Checkpoint, RetentionNeverDeletesNewerCheckpoints) {
  // Resumed from step 10 although step 20 exists: saving 15 with keep=1 removes 10, not 20.
  TempDir run;
  save_checkpoint(run.path(), sample(10));
  save_checkpoint(run.path(), sample(20));
  save_checkpoint(run.path(), sample(15), /*keep=*/1);
  EXPECT_EQ(list_checkpoints(run.path()), (std::vector<int64_t>{15, 20}));
  EXPECT_EQ(find_latest_checkpoint(run.path()), ckpt(run, 15));
}

TEST(Checkpoint, SavingAnExistingStepReplacesIt) {
  TempDir run;
  save_checkpoint(run.path(), sample(3));
  CheckpointData other = sample(7);
  other.step = 3;
  save_checkpoint(run.path(), other);
  expect_same(load_checkpoint(ckpt(run, 3)), other);
  EXPECT_EQ(list_checkpoints(run.path()), std::vector<int64_t>{3});
  auto entries = fs::directory_iterator(checkpoints_dir(run.path()));
  EXPECT_EQ(std::distance(begin(entries), end(entries)), 2) << "step_00000003 and latest only";
}

TEST(Checkpoint, CrashDuringASaveLeavesThePreviousOneLoadable) {
  TempDir run;
  save_checkpoint(run.path(), sample(1));
  const std::string dir = checkpoints_dir(run.path());
  // A save of step 2 killed while writing: a temporary directory holding half a file, and a
  // temporary `latest` that was never renamed into place.
  fs::create_directory(dir + "/.tmp.step_00000002.999.0");
  write_bytes(dir + "/.tmp.step_00000002.999.0/model.safetensors", "\x40\x00\x00");
  write_bytes(dir + "/latest.tmp.999.3", "step_00000002\n");
  EXPECT_EQ(find_latest_checkpoint(run.path()), ckpt(run, 1));
  EXPECT_EQ(list_checkpoints(run.path()), std::vector<int64_t>{1});
  expect_same(load_checkpoint(ckpt(run, 1)), sample(1));

  // The next save succeeds and sweeps the leftovers.
  save_checkpoint(run.path(), sample(2));
  EXPECT_FALSE(fs::exists(dir + "/.tmp.step_00000002.999.0"));
  EXPECT_FALSE(fs::exists(dir + "/latest.tmp.999.3"));
  expect_same(load_checkpoint(*find_latest_checkpoint(run.path())), sample(2));
}

TEST(Checkpoint, CrashBeforeLatestIsUpdatedKeepsThePreviousLatest) {
  // Killed after the rename but before `latest` moved: the pointer is the commit point.
  TempDir run;
  save_checkpoint(run.path(), sample(1));
  save_checkpoint(run.path(), sample(2));
  write_bytes(checkpoints_dir(run.path()) + "/latest", "step_00000001\n");
  EXPECT_EQ(find_latest_checkpoint(run.path()), ckpt(run, 1));
  // Killed before the very first `latest` was written: the newest published one is used.
  fs::remove(checkpoints_dir(run.path()) + "/latest");
  EXPECT_EQ(find_latest_checkpoint(run.path()), ckpt(run, 2));
}

TEST(Checkpoint, AFailedSaveChangesNothing) {
  TempDir run;
  save_checkpoint(run.path(), sample(1));
  CheckpointData bad = sample(2);
  bad.model.push_back(bad.model.front());  // a duplicate name: the writer refuses it
  EXPECT_TRUE(
      mentions(error_of([&] { save_checkpoint(run.path(), bad, 1); }), {"wte.weight", "twice"}));
  bad = sample(2);
  bad.state = nlohmann::json::array();
  EXPECT_TRUE(mentions(error_of([&] { save_checkpoint(run.path(), bad); }),
                       {"state must be a JSON object"}));
  bad.state = sample(2).state;
  bad.state["optimizer"]["lr"] = std::nan("");
  EXPECT_TRUE(mentions(error_of([&] { save_checkpoint(run.path(), bad); }),
                       {"state.optimizer.lr is nan", "JSON cannot hold"}));
  EXPECT_EQ(find_latest_checkpoint(run.path()), ckpt(run, 1));
  auto entries = fs::directory_iterator(checkpoints_dir(run.path()));
  EXPECT_EQ(std::distance(begin(entries), end(entries)), 2) << "no temporary left behind";
  expect_same(load_checkpoint(ckpt(run, 1)), sample(1));
}

TEST(Checkpoint, BrokenLatestPointer) {
  TempDir run;
  save_checkpoint(run.path(), sample(1));
  const std::string latest = checkpoints_dir(run.path()) + "/latest";
  write_bytes(latest, "step_00000009\n");
  EXPECT_TRUE(mentions(error_of([&] { find_latest_checkpoint(run.path()); }),
                       {latest, "step_00000009", "does not exist"}));
  write_bytes(latest, "../../etc\n");
  EXPECT_TRUE(
      mentions(error_of([&] { find_latest_checkpoint(run.path()); }), {latest, "got '../../etc'"}));
  write_bytes(latest, std::string(1 << 20, 'x'));
  EXPECT_TRUE(mentions(error_of([&] { find_latest_checkpoint(run.path()); }), {latest}));
}

// Resume's choice: the newest checkpoint that loads, newest first from `latest`, with each one
// passed over named and explained.
TEST(Checkpoint, NewestGoodCheckpointPassesOverCorruptOnes) {
  TempDir run;
  std::vector<SkippedCheckpoint> skipped;
  EXPECT_EQ(load_newest_good_checkpoint(run.path(), &skipped), std::nullopt) << "a new run";
  EXPECT_TRUE(skipped.empty());
  for (int64_t step = 1; step <= 3; ++step) save_checkpoint(run.path(), sample(step));

  std::optional<LoadedCheckpoint> got = load_newest_good_checkpoint(run.path(), &skipped);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->dir, ckpt(run, 3));
  expect_same(got->data, sample(3));
  EXPECT_TRUE(skipped.empty());

  // Step 3 truncated, step 2 with a flipped bit: step 1, after two skips in that order.
  const std::string model3 = ckpt(run, 3) + "/model.safetensors";
  const std::string good3 = read_bytes(model3);
  write_bytes(model3, good3.substr(0, good3.size() - 7));
  const std::string opt2 = ckpt(run, 2) + "/optimizer.safetensors";
  std::string flipped = read_bytes(opt2);
  flipped[flipped.size() - 2] ^= 0x01;
  write_bytes(opt2, flipped);
  got = load_newest_good_checkpoint(run.path(), &skipped);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->dir, ckpt(run, 1));
  expect_same(got->data, sample(1));
  ASSERT_EQ(skipped.size(), 2u);
  EXPECT_EQ(skipped[0].dir, ckpt(run, 3));
  EXPECT_TRUE(mentions(skipped[0].reason, {model3, "truncated or replaced"}));
  EXPECT_EQ(skipped[1].dir, ckpt(run, 2));
  EXPECT_TRUE(mentions(skipped[1].reason, {opt2, "checksum", "corrupt"}));

  // None loads: one error with every reason.
  fs::remove(ckpt(run, 1) + "/state.json");
  EXPECT_TRUE(mentions(
      error_of([&] { load_newest_good_checkpoint(run.path(), &skipped); }),
      {"no checkpoint of", ckpt(run, 3), ckpt(run, 2), ckpt(run, 1), "missing state.json"}));
}

TEST(Checkpoint, NewestGoodCheckpointStartsFromLatest) {
  TempDir run;
  for (int64_t step = 1; step <= 3; ++step) save_checkpoint(run.path(), sample(step));
  const std::string latest = checkpoints_dir(run.path()) + "/latest";
  std::vector<SkippedCheckpoint> skipped;
  // A run resumed from step 2 (step 3 is another history): step 3 is never a candidate.
  write_bytes(latest, "step_00000002\n");
  write_bytes(ckpt(run, 2) + "/state.json", "{");
  std::optional<LoadedCheckpoint> got = load_newest_good_checkpoint(run.path(), &skipped);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->dir, ckpt(run, 1));
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].dir, ckpt(run, 2));
  // A `latest` that names nothing is itself passed over: the candidates start from the highest
  // step.
  write_bytes(latest, "step_00000009\n");
  got = load_newest_good_checkpoint(run.path(), &skipped);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->dir, ckpt(run, 3));
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].dir, latest);
  EXPECT_TRUE(mentions(skipped[0].reason, {"step_00000009", "does not exist"}));
}

TEST(Checkpoint, CorruptStateJson) {
  TempDir run;
  const std::string dir = save_checkpoint(run.path(), sample(4));
  const std::string state = dir + "/state.json";
  const std::string good = read_bytes(state);
  auto err = [&] { return error_of([&] { load_checkpoint(dir); }); };

  write_bytes(state, good.substr(0, good.size() / 2));
  EXPECT_TRUE(mentions(err(), {state, "not valid JSON"}));
  write_bytes(state, "[1, 2]");
  EXPECT_TRUE(mentions(err(), {state, "expected a JSON object"}));
  // A number past a double's range: nlohmann's out_of_range, not a parse_error (found by
  // fuzz/checkpoint_state; it escaped as a non-tessera exception before).
  write_bytes(state, R"({"format": "tessera-checkpoint", "step": 5555555555555555555E555})");
  EXPECT_TRUE(mentions(err(), {state, "not valid JSON", "number overflow"}));
  // 30000 levels of '[' overflowed the stack when the reader copied 'format' (found by
  // fuzz/checkpoint_state).
  write_bytes(state, R"({"format": )" + std::string(30000, '[') + std::string(30000, ']') + "}");
  EXPECT_TRUE(mentions(err(), {state, "nests deeper than 64 levels", "byte offset 74"}));
  write_bytes(state, good);
  edit_state(dir, [](auto& j) { j["format"] = "pytorch"; });
  EXPECT_TRUE(mentions(err(), {state, "'format' is \"pytorch\""}));
  write_bytes(state, good);
  // A newer format is named as such, with this build's version; a non-version is refused.
  edit_state(dir, [](auto& j) { j["version"] = 2; });
  EXPECT_TRUE(mentions(err(), {state, "'version'", "tessera-checkpoint version 2 is newer than",
                               str_cat("this Tessera (", version(), ")"), "upgrade Tessera"}));
  write_bytes(state, good);
  edit_state(dir, [](auto& j) { j["version"] = "one"; });
  EXPECT_TRUE(mentions(err(), {state, "\"one\" is not a tessera-checkpoint version"}));
  write_bytes(state, good);
  edit_state(dir, [](auto& j) { j["step"] = 5; });
  EXPECT_TRUE(mentions(err(), {state, "'step' is 5", "step_00000004"}));
  write_bytes(state, good);
  edit_state(dir, [](auto& j) { j["step"] = -1; });
  EXPECT_TRUE(mentions(err(), {state, "'step' must be a non-negative integer"}));
  write_bytes(state, good);
  edit_state(dir, [](auto& j) { j["files"].erase("optimizer.safetensors"); });
  EXPECT_TRUE(mentions(err(), {state, "no record for optimizer.safetensors"}));
  fs::remove(state);
  EXPECT_TRUE(mentions(err(), {dir, "missing state.json"}));
  EXPECT_TRUE(mentions(error_of([&] { load_checkpoint(dir + "/nope"); }), {"not a directory"}));
}

TEST(Checkpoint, CorruptTensorFiles) {
  TempDir run;
  const std::string dir = save_checkpoint(run.path(), sample(4));
  const std::string model = dir + "/model.safetensors";
  const std::string good = read_bytes(model);
  const std::string good_state = read_bytes(dir + "/state.json");
  auto err = [&] { return error_of([&] { load_checkpoint(dir); }); };

  write_bytes(model, good.substr(0, good.size() - 1));
  EXPECT_TRUE(mentions(err(), {model, "truncated or replaced"}));
  write_bytes(model, good);
  flip_a_data_bit(model);
  EXPECT_TRUE(mentions(err(), {model, "checksum", "corrupt"}));
  // A tensor file from another checkpoint.
  const std::string other = save_checkpoint(run.path(), sample(5));
  fs::copy_file(other + "/optimizer.safetensors", dir + "/optimizer.safetensors",
                fs::copy_options::overwrite_existing);
  write_bytes(model, good);
  EXPECT_TRUE(mentions(err(), {"optimizer.safetensors", "checksum"}));
  fs::copy_file(other + "/optimizer.safetensors", dir + "/optimizer.safetensors",
                fs::copy_options::overwrite_existing);
  fs::remove(model);
  EXPECT_TRUE(mentions(err(), {model, "missing"}));

  // state.json's tensor list disagreeing with an intact file names the tensor.
  write_bytes(model, good);
  fs::copy_file(other + "/optimizer.safetensors", dir + "/optimizer.safetensors",
                fs::copy_options::overwrite_existing);
  auto restore = [&] {
    write_bytes(dir + "/state.json", good_state);
    edit_state(dir, [&](auto& j) {
      j["files"]["optimizer.safetensors"] = nlohmann::json::parse(
          read_bytes(other + "/state.json"))["files"]["optimizer.safetensors"];
    });
  };
  restore();
  EXPECT_NO_THROW(load_checkpoint(dir));
  edit_state(dir, [](auto& j) { j["files"]["model.safetensors"]["tensors"].erase(1); });
  EXPECT_TRUE(mentions(err(), {model, "unexpected tensor 'h.0.ln_1.weight'"}));
  restore();
  edit_state(dir, [](auto& j) {
    j["files"]["model.safetensors"]["tensors"].push_back(
        {{"name", "lm_head.weight"}, {"dtype", "f32"}, {"shape", {16, 4}}});
  });
  EXPECT_TRUE(mentions(err(), {model, "'lm_head.weight' listed in", "missing"}));
  restore();
  edit_state(dir, [](auto& j) {
    j["files"]["model.safetensors"]["tensors"][0]["shape"] = {4, 16};
  });
  EXPECT_TRUE(mentions(err(), {model, "'wte.weight' is f32[16,4]", "records f32[4,16]"}));
}

}  // namespace
}  // namespace tessera::nn
