// `tessera train --precision` and `--device`: bf16 runs track fp32 with fp32 checkpoints, fp16
// overflows are skipped and counted, an fp16 resume keeps the loss scale bit-exactly, and the
// flags are printed, and refused with one line.

#include <sys/wait.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "tessera/train/trainer.h"
#include "tools/tools_test_util.h"
#if defined(TESSERA_HAS_CUDA)
#include "tessera/cuda/cuda.h"
#endif

namespace tessera::cli::testing {
namespace {

std::vector<nlohmann::json> read_metrics(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

TrainOptions no_dropout(const ScratchDir& dir, const std::string& run) {
  TrainOptions o = tiny_options(dir, run);
  o.model_overrides["dropout"] = 0.0;
  drop_validation(o);
  o.max_steps = 6;
  return o;
}

// bf16 stores 8 significant bits (2^-9 = 0.2% relative rounding per weight and activation),
// while the loss itself is computed in fp32 from the bf16 logits. Measured over these 6 steps:
// at most 0.0007 nats apart as the loss falls from 5.56 to 4.96. The bound 0.01 leaves room
// for other thread counts and compilers, and is 60 times smaller than the fall, so a bf16 run
// whose updates were lost (a flat loss) or misscaled fails it.
TEST(TrainerPrecision, Bf16TracksFp32AndCheckpointsFp32MasterWeights) {
  ScratchDir dir;
  write_corpus_shards(dir);
  std::ostringstream out32, out16;
  TrainOptions a = no_dropout(dir, "fp32");
  Trainer(a).fit(&out32);
  TrainOptions b = no_dropout(dir, "bf16");
  b.precision = "bf16";
  Trainer(b).fit(&out16);
  std::vector<nlohmann::json> ma = read_metrics(a.run_dir), mb = read_metrics(b.run_dir);
  ASSERT_EQ(ma.size(), 6u);
  ASSERT_EQ(mb.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_NEAR(mb[i]["loss"].get<double>(), ma[i]["loss"].get<double>(), 0.01) << "step " << i;
    EXPECT_EQ(mb[i]["precision"], "bf16");
    EXPECT_FALSE(mb[i].contains("loss_scale")) << "bf16 needs no loss scale";
  }
  EXPECT_LT(mb[5]["loss"].get<double>(), mb[0]["loss"].get<double>() - 0.1);
  EXPECT_NE(out16.str().find("precision: bf16 (bf16 weights and activations; fp32 master"),
            std::string::npos)
      << out16.str();
  EXPECT_NE(out16.str().find("| bf16"), std::string::npos) << out16.str();
  EXPECT_EQ(out32.str().find("| fp32"), std::string::npos) << "fp32 step lines stay as they were";

  nn::CheckpointData c = nn::load_checkpoint(b.run_dir + "/checkpoints/step_00000006");
  for (const auto& [name, t] : c.model) {
    if (is_floating(t.dtype())) {
      EXPECT_EQ(t.dtype(), DType::f32) << name;
    }
  }
  EXPECT_EQ(c.state["precision"]["precision"], "bf16");
}

// A loss scale of 2^120 overflows fp16 gradients: both steps are skipped (the scale backs off
// to 2^119, still overflowing), counted, printed, and no weight moves: the checkpoint holds
// the initial weights exactly.
TEST(TrainerPrecision, Fp16OverflowIsSkippedAndCounted) {
  ScratchDir dir;
  write_corpus_shards(dir);
  TrainOptions o = no_dropout(dir, "run");
  o.precision = "fp16";
  o.loss_scale_init = std::ldexp(1.0, 120);
  o.max_steps = 2;
  o.warmup_steps = 0;
  std::ostringstream out;
  FitResult r = Trainer(o).fit(&out);
  EXPECT_EQ(r.final_step, 2);
  std::vector<nlohmann::json> m = read_metrics(o.run_dir);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0]["loss_scale"].get<double>(), std::ldexp(1.0, 120));
  EXPECT_EQ(m[1]["loss_scale"].get<double>(), std::ldexp(1.0, 119));
  EXPECT_TRUE(m[1]["skipped"].get<bool>());
  EXPECT_EQ(m[1]["skipped_steps"], 2);
  EXPECT_NE(out.str().find("| fp16 scale 6.64614e+35 | skipped 2 (this step: overflow)"),
            std::string::npos)
      << out.str();

  nn::CheckpointData c = nn::load_checkpoint(o.run_dir + "/checkpoints/step_00000002");
  nn::GPT fresh(nn::GPTConfig::from_json(c.state["model_config"]));
  for (const auto& [name, t] : fresh.state_dict())
    EXPECT_TRUE(equal(t, nn::find_tensor(c.model, name))) << name;
  EXPECT_EQ(c.state["precision"]["loss_scaler"]["scale"].get<double>(), std::ldexp(1.0, 118));
}

// fp16 with the scale doubling every 3 clean steps: a run resumed from its step-4 checkpoint
// repeats the uninterrupted run's losses and loss scales bit-for-bit (the scale and the count
// of clean steps come back from the checkpoint; with a fresh scaler the scale at step 6 would
// be 2^16, not 2^17).
TEST(TrainerPrecision, Fp16ResumeKeepsTheLossScaleExactly) {
  ScratchDir dir;
  write_corpus_shards(dir);
  std::ostringstream quiet;
  TrainOptions full = tiny_options(dir, "full");
  full.precision = "fp16";
  full.loss_scale_window = 3;
  Trainer(full).fit(&quiet);
  std::vector<nlohmann::json> ma = read_metrics(full.run_dir);
  ASSERT_EQ(ma.size(), 8u);
  EXPECT_EQ(ma[3]["loss_scale"].get<double>(), std::ldexp(1.0, 17));
  EXPECT_EQ(ma[6]["loss_scale"].get<double>(), std::ldexp(1.0, 18));

  TrainOptions resumed = full;
  resumed.run_dir = dir / "resumed";
  fs::create_directories(resumed.run_dir + "/checkpoints");
  fs::copy(full.run_dir + "/checkpoints/step_00000004",
           resumed.run_dir + "/checkpoints/step_00000004", fs::copy_options::recursive);
  FitResult r = Trainer(resumed).fit(&quiet);
  EXPECT_EQ(r.start_step, 4);
  std::vector<nlohmann::json> mb = read_metrics(resumed.run_dir);
  ASSERT_EQ(mb.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(mb[i]["loss"].get<double>(), ma[i + 4]["loss"].get<double>()) << "step " << i + 5;
    EXPECT_EQ(mb[i]["loss_scale"].get<double>(), ma[i + 4]["loss_scale"].get<double>());
    EXPECT_EQ(mb[i]["skipped_steps"], ma[i + 4]["skipped_steps"]);
  }
}

struct Exit {
  int code;
  std::string err;
};

Exit run_cli(const std::string& args, const ScratchDir& dir) {
  const std::string err = dir / "err.txt";
  const std::string cmd =
      std::string(TESSERA_CLI_PATH) + " " + args + " > " + (dir / "out.txt") + " 2> " + err;
  const int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_text_file(err)};
}

TEST(TrainerPrecision, FlagsAreCheckedWithOneLine) {
  ScratchDir dir;
  write_corpus_shards(dir);
  const std::string base = "train --train-data '" + (dir / "data/data_train_*.bin") +
                           "' --run-dir '" + (dir / "run") + "' --max-steps 1 --seq-len 8 " +
                           "--batch-size 2 --model '{\"n_layer\": 1, \"n_embd\": 16}' ";
  Exit bad = run_cli(base + "--precision fp8", dir);
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(bad.err, "tessera: error: train: --precision must be fp32, bf16 or fp16, got 'fp8'\n");
  Exit device = run_cli(base + "--device tpu", dir);
  EXPECT_EQ(device.code, 1);
  EXPECT_EQ(device.err, "tessera: error: train: --device must be cpu, cuda or cuda-sim, got 'tpu'\n");

#if defined(TESSERA_HAS_CUDA)
  if (cuda::device_count() > 0) GTEST_SKIP() << "a GPU is present: --device cuda would train";
  const std::string reason = "no GPU found";
#else
  const std::string reason = "this build has no CUDA backend";
#endif
  Exit cuda = run_cli(base + "--device cuda --precision bf16", dir);
  EXPECT_EQ(cuda.code, 2);
  EXPECT_EQ(cuda.err, "tessera train: --device cuda: no CUDA device (" + reason + ")\n");
}

// The options round-trip through config.json, and the scaler's settings are validated.
TEST(TrainerPrecision, OptionsRoundTripAndValidate) {
  ScratchDir dir;
  TrainOptions o = tiny_options(dir, "run");
  o.update_from_json(
      {{"precision", "fp16"}, {"loss_scale_init", 1024.0}, {"loss_scale_window", 7}});
  TrainOptions back;
  back.update_from_json(o.to_json());
  EXPECT_EQ(back.precision, "fp16");
  EXPECT_EQ(back.loss_scaler().init_scale, 1024.0);
  EXPECT_EQ(back.loss_scaler().growth_interval, 7);
  o.loss_scale_window = 0;
  EXPECT_THROW(o.validate(), Error);
  o.loss_scale_window = 1;
  o.loss_scale_init = 0.5;
  EXPECT_THROW(o.validate(), Error);
}

}  // namespace
}  // namespace tessera::cli::testing
