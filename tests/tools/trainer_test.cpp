// The training loop: exact resume, checkpoints, metrics, the run lock and progress lines
// (the options' own checks: train_options_test.cpp).

#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "nn/hf_llama_folder.h"
#include "support/error_of.h"
#include "tessera/core/threads.h"
#include "tessera/cuda/cuda.h"
#include "tessera/nn/io/hf_gpt2.h"
#include "tessera/train/metrics.h"
#include "tessera/train/trainer.h"
#include "tools/tools_test_util.h"

namespace tessera::cli::testing {
namespace {

std::vector<nlohmann::json> read_metrics(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(Trainer, ResumedRunRepeatsTheUninterruptedLossesExactly) {
  ScratchDir dir;
  write_corpus_shards(dir);
  std::ostringstream quiet;

  // Uninterrupted: 8 steps with checkpoints at 4 and 8.
  TrainOptions full = tiny_options(dir, "full");
  FitResult a = Trainer(full).fit(&quiet);
  ASSERT_EQ(a.final_step, 8);
  std::vector<nlohmann::json> ma = read_metrics(full.run_dir);
  ASSERT_EQ(ma.size(), 8u);

  // Interrupted after step 4: a run directory holding only the step-4 checkpoint, plus a log
  // that went on past it (a crash after the checkpoint), then resumed with the same options.
  TrainOptions resumed = tiny_options(dir, "resumed");
  fs::create_directories(resumed.run_dir + "/checkpoints");
  fs::copy(full.run_dir + "/checkpoints/step_00000004",
           resumed.run_dir + "/checkpoints/step_00000004", fs::copy_options::recursive);
  {
    std::ofstream log(resumed.run_dir + "/metrics.jsonl");
    for (size_t i = 0; i < 6; ++i) log << ma[i].dump() << "\n";
    log << "{\"step\": 7, \"loss\"";  // torn line
  }
  FitResult b = Trainer(resumed).fit(&quiet);
  EXPECT_EQ(b.start_step, 4);
  EXPECT_EQ(b.final_step, 8);
  std::vector<nlohmann::json> mb = read_metrics(resumed.run_dir);
  ASSERT_EQ(mb.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(mb[i]["step"], ma[i]["step"]);
    // Bit-for-bit: JSON keeps doubles exactly, and the loss is a float widened to double.
    EXPECT_EQ(mb[i]["loss"].get<double>(), ma[i]["loss"].get<double>()) << "step " << i + 1;
    EXPECT_EQ(mb[i]["grad_norm"].get<double>(), ma[i]["grad_norm"].get<double>());
  }
  EXPECT_EQ(mb[7]["val_loss"].get<double>(), ma[7]["val_loss"].get<double>());

  // Final weights agree too.
  nn::CheckpointData ca = nn::load_checkpoint(full.run_dir + "/checkpoints/step_00000008");
  nn::CheckpointData cb = nn::load_checkpoint(resumed.run_dir + "/checkpoints/step_00000008");
  ASSERT_EQ(ca.model.size(), cb.model.size());
  for (size_t i = 0; i < ca.model.size(); ++i)
    EXPECT_TRUE(equal(ca.model[i].second, cb.model[i].second)) << ca.model[i].first;
}

// The newest checkpoints do not load (one truncated, one bit-flipped): --resume auto passes
// over both, saying so in one line each, resumes from the one before, and ends with the
// losses and weights of the unbroken run. --resume DIR takes that checkpoint, or stops.
TEST(Trainer, ResumePassesOverCorruptCheckpointsAndEndsTheSame) {
  using tessera::testing::error_of;
  ScratchDir dir;
  write_corpus_shards(dir);
  std::ostringstream quiet;
  TrainOptions full = tiny_options(dir, "full");
  full.checkpoint_every = 2;
  ASSERT_EQ(Trainer(full).fit(&quiet).final_step, 8);
  const std::vector<nlohmann::json> ma = read_metrics(full.run_dir);

  // A crash after step 6's checkpoint, with steps 4 and 6 damaged on disk.
  TrainOptions broken = tiny_options(dir, "broken");
  broken.checkpoint_every = 2;
  const std::string ck = broken.run_dir + "/checkpoints";
  fs::create_directories(ck);
  for (const char* name : {"step_00000002", "step_00000004", "step_00000006"})
    fs::copy(full.run_dir + "/checkpoints/" + name, ck + "/" + name, fs::copy_options::recursive);
  std::ofstream(ck + "/latest") << "step_00000006\n";
  {
    std::ofstream log(broken.run_dir + "/metrics.jsonl");
    for (size_t i = 0; i < 6; ++i) log << ma[i].dump() << "\n";
  }
  const std::string model6 = ck + "/step_00000006/model.safetensors";
  fs::resize_file(model6, fs::file_size(model6) - 1);
  const std::string opt4 = ck + "/step_00000004/optimizer.safetensors";
  {
    std::fstream f(opt4, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-5, std::ios::end);
    const char c = char(f.get());
    f.seekp(-5, std::ios::end);
    f.put(char(c ^ 0x20));
  }
  std::ostringstream out;
  FitResult b = Trainer(broken).fit(&out);
  const std::string text = out.str();
  EXPECT_NE(text.find("skipping checkpoint " + ck + "/step_00000006: " + model6), std::string::npos)
      << text;
  EXPECT_NE(text.find("truncated or replaced"), std::string::npos) << text;
  EXPECT_NE(text.find("skipping checkpoint " + ck + "/step_00000004: " + opt4), std::string::npos)
      << text;
  EXPECT_NE(text.find("resuming from " + ck + "/step_00000002\n"), std::string::npos) << text;
  EXPECT_LT(text.find("step_00000006: "), text.find("step_00000004: "));
  EXPECT_EQ(b.start_step, 2);
  EXPECT_EQ(b.final_step, 8);
  const std::vector<nlohmann::json> mb = read_metrics(broken.run_dir);
  ASSERT_EQ(mb.size(), 8u);
  for (size_t i = 0; i < 8; ++i)
    EXPECT_EQ(mb[i]["loss"].get<double>(), ma[i]["loss"].get<double>()) << "step " << i + 1;
  nn::CheckpointData ca = nn::load_checkpoint(full.run_dir + "/checkpoints/step_00000008");
  nn::CheckpointData cb = nn::load_checkpoint(ck + "/step_00000008");
  ASSERT_EQ(ca.model.size(), cb.model.size());
  for (size_t i = 0; i < ca.model.size(); ++i)
    EXPECT_TRUE(equal(ca.model[i].second, cb.model[i].second)) << ca.model[i].first;

  // --resume DIR: exactly that checkpoint, from any directory.
  TrainOptions chosen = tiny_options(dir, "chosen");
  chosen.resume = full.run_dir + "/checkpoints/step_00000004";
  FitResult c = Trainer(chosen).fit(&quiet);
  EXPECT_EQ(c.start_step, 4);
  EXPECT_EQ(read_metrics(chosen.run_dir).back()["loss"].get<double>(), ma[7]["loss"].get<double>());
  // ... which must load, and must exist.
  // (The resumed run saved a good step 6 over the damaged one: damage a copy.)
  const std::string damaged = dir / "damaged_step_6";
  fs::copy(full.run_dir + "/checkpoints/step_00000006", damaged, fs::copy_options::recursive);
  fs::resize_file(damaged + "/model.safetensors", fs::file_size(model6) - 1);
  TrainOptions bad = tiny_options(dir, "bad");
  bad.resume = damaged;
  std::string e = error_of([&] { Trainer t(bad); });
  EXPECT_NE(e.find(damaged + "/model.safetensors: "), std::string::npos) << e;
  EXPECT_NE(e.find("truncated or replaced"), std::string::npos) << e;
  bad.resume = dir / "no_such_checkpoint";
  e = error_of([&] { Trainer t(bad); });
  EXPECT_NE(e.find("--resume must be auto, never or a checkpoint directory, got '" + bad.resume),
            std::string::npos)
      << e;
}

TEST(Trainer, LossFallsAndCheckpointsHoldEverything) {
  ScratchDir dir;
  write_corpus_shards(dir);
  TrainOptions o = tiny_options(dir, "run");
  o.max_steps = 100;
  o.model_overrides["dropout"] = 0.0;
  o.checkpoint_every = 0;
  o.eval_every = 0;
  std::ostringstream out;
  FitResult r = Trainer(o).fit(&out);
  std::vector<nlohmann::json> m = read_metrics(o.run_dir);
  ASSERT_EQ(m.size(), 100u);
  // The untrained model starts near ln(257) = 5.55 nats. A model that ignored context could
  // not go below the corpus's unigram byte entropy, 3.27 nats (computed offline from the text
  // write_corpus_shards makes); 3.0 requires using the context.
  EXPECT_GT(m.front()["loss"].get<double>(), 5.0);
  EXPECT_LT(r.final_loss, 3.0);
  ASSERT_TRUE(r.final_val_loss.has_value());
  for (const char* key :
       {"lr", "grad_norm", "ms", "tokens_per_s", "mfu", "live_bytes", "rss_bytes"})
    EXPECT_TRUE(m.back().contains(key)) << key;
  nn::CheckpointData c = nn::load_checkpoint(*nn::find_latest_checkpoint(o.run_dir));
  EXPECT_EQ(c.step, 100);
  for (const char* key : {"options", "model_config", "optimizer", "loader"})
    EXPECT_TRUE(c.state.contains(key)) << key;
  EXPECT_NE(out.str().find("parameters:"), std::string::npos);
  EXPECT_NE(out.str().find("MFU is against a peak of"), std::string::npos);
}

// MFU is FLOPs over the stated peak; past 100% that peak is too low, and the run says so once
// rather than logging an impossible figure as fact (--peak-gflops 5 had printed MFU 2000%).
TEST(Trainer, MfuAboveTheStatedPeakIsCalledOutOnce) {
  ScratchDir dir;
  write_corpus_shards(dir);
  TrainOptions o = tiny_options(dir, "run");
  o.max_steps = 3;
  o.checkpoint_every = 0;
  drop_validation(o);
  o.peak_gflops = 1e-6;  // a thousand FLOP/s: any step exceeds it
  std::ostringstream out;
  Trainer(o).fit(&out);
  const std::string log = out.str();
  const size_t first = log.find("warning: step 1 ran at ");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_NE(log.find("of the peak of 1e-06 GFLOP/s (--peak-gflops); MFU above 100% means that "
                     "peak is too low",
                     first),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("warning: step", first + 1), std::string::npos) << log;  // once
  for (const nlohmann::json& m : read_metrics(o.run_dir)) EXPECT_GT(m["mfu"].get<double>(), 1);

  o.peak_gflops = 0;  // this CPU's nominal peak, which the tiny model stays far below
  o.run_dir = dir / "nominal";
  std::ostringstream nominal;
  Trainer(o).fit(&nominal);
  EXPECT_EQ(nominal.str().find("warning:"), std::string::npos) << nominal.str();
}

// The banner says what the validation loss is over; a split with fewer batches than
// --eval-batches is said to cap it (it capped it without a word).
TEST(Trainer, BannerSaysWhatValidationReads) {
  ScratchDir dir;
  write_corpus_shards(dir);
  TrainOptions o = tiny_options(dir, "run");
  o.max_steps = 3;  // past the 2 warm-up steps
  EXPECT_NE(Trainer(o).banner().find("validation: 2 batches of 4 x 16, every 4 steps and at "
                                     "the end\n"),
            std::string::npos);
  o.eval_batches = 1000000000;
  const std::string capped = Trainer(o).banner();
  EXPECT_NE(capped.find("(--eval-batches 1000000000; the split holds "), std::string::npos)
      << capped;
}

TEST(Trainer, RefusesToResumeWithDifferentDataOrder) {
  ScratchDir dir;
  write_corpus_shards(dir);
  TrainOptions o = tiny_options(dir, "run");
  o.max_steps = 4;
  std::ostringstream quiet;
  Trainer(o).fit(&quiet);
  o.seed = 7;
  o.max_steps = 8;
  try {
    Trainer(o).fit(&quiet);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("seed"), std::string::npos) << e.what();
  }
}

// --recompute changes memory and time only: the logged losses of either engine (AdamW: the
// layout engine; SGD: the module engine) equal the run without it, bit for bit.
TEST(Trainer, RecomputeKeepsTheLossesOfNone) {
  ScratchDir dir;
  write_corpus_shards(dir);
  for (const char* optimizer : {"adamw", "sgd"}) {
    auto losses = [&](const std::string& mode, int64_t layers) {
      TrainOptions o =
          tiny_options(dir, std::string(optimizer) + "_" + mode + std::to_string(layers));
      o.optimizer = optimizer;
      o.max_steps = 4;
      o.checkpoint_every = 0;
      o.recompute = mode;
      o.recompute_layers = layers;
      std::ostringstream quiet;
      Trainer(o).fit(&quiet);
      std::vector<double> l;
      for (const nlohmann::json& m : read_metrics(o.run_dir)) l.push_back(m["loss"].get<double>());
      return l;
    };
    const std::vector<double> none = losses("none", -1);
    ASSERT_EQ(none.size(), 4u);
    EXPECT_EQ(losses("selective", -1), none) << optimizer;
    EXPECT_EQ(losses("full", 1), none) << optimizer;
  }
}

// --init-from: a run starts at the imported weights, bit for bit, with the weights' shape and
// the dropout asked for; a preset or an override the weights contradict is refused (both were
// dropped without a word: an n_layer override trained the weights' layer count).
TEST(Trainer, InitFromStartsAtTheImportedWeights) {
  ScratchDir dir;
  write_corpus_shards(dir);
  std::ostringstream quiet;
  TrainOptions src = tiny_options(dir, "src");
  src.max_steps = 3;  // past the 2 warm-up steps
  Trainer source(src);
  source.fit(&quiet);
  const nn::StateDict exported = source.full_state();
  nn::export_hf_gpt2(dir / "hf", exported, source.model_config(), -1);

  TrainOptions o = tiny_options(dir, "init");
  o.init_from = dir / "hf";
  o.model_overrides = {{"dropout", 0.2}, {"n_layer", 2}};  // n_layer: what the weights say
  auto imported = std::make_unique<Trainer>(o);
  EXPECT_EQ(imported->model_config().n_layer, 2);
  EXPECT_EQ(imported->model_config().n_embd, 32);
  EXPECT_EQ(imported->model_config().dropout, 0.2);  // HF weights record none: 0 without it
  const nn::StateDict state = imported->full_state();
  const std::map<std::string, Tensor> start(state.begin(), state.end());
  ASSERT_EQ(start.size(), exported.size());
  const int64_t vocab = source.model_config().vocab_size;  // the padding rows are not exported
  for (const auto& [name, t] : exported) {
    ASSERT_TRUE(start.count(name)) << name;
    const bool rows = t.dim() == 2 && t.size(0) == source.model_config().padded_vocab_size();
    auto values = [&](const Tensor& x) {
      return to_vector<float>(ops::contiguous(rows ? ops::narrow(x, 0, 0, vocab) : x));
    };
    EXPECT_EQ(values(start.at(name)), values(t)) << name;
  }
  imported.reset();  // one trainer per run directory at a time (run_lock.h)

  using tessera::testing::error_of;
  o.model_overrides = {{"n_layer", 6}};
  EXPECT_NE(error_of([&] { Trainer{o}; })
                .find("train: --model gives n_layer 6; --init-from " + o.init_from +
                      " has n_layer 2 (only dropout may differ)"),
            std::string::npos);
  o.model_overrides = nlohmann::json::object();
  o.preset = "gpt2-d12";
  EXPECT_NE(error_of([&] {
              Trainer{o};
            }).find("train: --preset gpt2-d12 does not apply with --init-from"),
            std::string::npos);
}

// --init-from a Hugging Face Llama folder as transformers shards one (bf16, an index over two
// files): the run starts at those weights, each tensor read by range straight into the master
// and widened from bf16 exactly; the rows padding the vocabulary are zero. Under AdamW one
// process runs on the layout engine (ParallelTrainer::load_model_source), under SGD on the
// module engine (ModuleEngine::load_model_source).
TEST(Trainer, InitFromALlamaFolderReadsItsShardsIntoTheMaster) {
  ScratchDir dir;
  write_corpus_shards(dir);
  const nn::GPTConfig c = nn::testing::byte_llama_config();
  const nn::GPT drawn(c);
  nn::testing::write_hf_llama_shards(dir / "hf", drawn.state_dict(), c, 2, DType::bf16);

  for (const char* optimizer : {"adamw", "sgd"}) {
    TrainOptions o = tiny_options(dir, std::string("init_") + optimizer);
    o.init_from = dir / "hf";
    o.model_overrides = {{"dropout", 0.0}};
    o.optimizer = optimizer;
    Trainer imported(o);
    EXPECT_EQ(imported.model_config().mlp, nn::MlpKind::swiglu);
    const nn::StateDict state = imported.full_state();
    ASSERT_EQ(state.size(), drawn.state_dict().size());
    for (const auto& [name, t] : state)
      EXPECT_EQ(to_vector<float>(t), to_vector<float>(nn::testing::folder_weight(
                                         drawn.state_dict(), name, c, DType::bf16)))
          << optimizer << " " << name;
  }
}

// Resuming: the checkpoint gives the model. A --model key, a --preset or an --init-from it
// contradicts is refused (each was dropped without a word: a 2-layer run resumed with n_layer 3
// trained 2 layers); dropout alone applies, and the same command resumes as before.
TEST(Trainer, ResumeRefusesAModelTheCheckpointDoesNotHold) {
  ScratchDir dir;
  write_corpus_shards(dir);
  std::ostringstream quiet;
  TrainOptions o = tiny_options(dir, "run");
  o.max_steps = 3;  // past the 2 warm-up steps
  Trainer(o).fit(&quiet);

  using tessera::testing::error_of;
  const std::string from = "the checkpoint of step 3 (" + o.run_dir + "/checkpoints/step_00000003";
  TrainOptions deeper = o;
  deeper.model_overrides["n_layer"] = 3;
  const std::string layers = error_of([&] { Trainer{deeper}; });
  EXPECT_NE(layers.find("train: --model gives n_layer 3; " + from +
                        ") it resumes from has n_layer 2 (only dropout may differ)"),
            std::string::npos)
      << layers;

  TrainOptions preset = o;
  preset.preset = "llama-tiny";  // 4 layers of 128 wide, not the run's 2 of 32
  preset.model_overrides = nlohmann::json::object();
  const std::string whole = error_of([&] { Trainer{preset}; });
  EXPECT_NE(whole.find("train: --preset llama-tiny gives bias false, block_size 256, mlp "
                       "\"swiglu\", n_embd 128, n_head 4, n_layer 4, norm \"rmsnorm\", position "
                       "\"rope\", tie_embeddings false; " +
                       from +
                       ") it resumes from has bias true, block_size 32, mlp \"gelu\", "
                       "n_embd 32, n_head 2, n_layer 2, norm \"layernorm\", position "
                       "\"learned\", tie_embeddings true (only dropout may differ)"),
            std::string::npos)
      << whole;

  TrainOptions imported = o;  // its weights would be dropped for the checkpoint's
  imported.init_from = dir / "hf";
  EXPECT_NE(error_of([&] { Trainer{imported}; })
                .find("train: --init-from " + imported.init_from +
                      " does not apply: the checkpoint resumed continues a run that started "
                      "from scratch"),
            std::string::npos);

  TrainOptions same = o;
  same.max_steps = 4;
  same.model_overrides["dropout"] = 0.3;
  {
    Trainer resumed(same);
    EXPECT_EQ(resumed.model_config().dropout, 0.3);
    EXPECT_EQ(resumed.model_config().n_layer, 2);
    EXPECT_EQ(resumed.steps_done(), 3);
    resumed.fit(&quiet);
    EXPECT_EQ(resumed.steps_done(), 4);
  }
  same.max_steps = 3;  // the run is past it: nothing to do, and it says so
  std::ostringstream past;
  Trainer(same).fit(&past);
  EXPECT_NE(past.str().find("nothing to train: the run is at step 4, --max-steps is 3"),
            std::string::npos)
      << past.str();
}

// One job per run directory: while a trainer holds it, a second is refused in one line after
// waiting RunLock::kWaitForExit (two wrote one set of checkpoints and one metrics.jsonl); once
// the first ends, it may start.
TEST(Trainer, OneJobPerRunDirectory) {
  ScratchDir dir;
  write_corpus_shards(dir);
  const TrainOptions o = tiny_options(dir, "run");
  auto first = std::make_unique<Trainer>(o);
  const std::string second = tessera::testing::error_of([&] { Trainer{o}; });
  EXPECT_NE(second.find("train: another tessera train is writing to " + o.run_dir + " (it holds " +
                        o.run_dir + "/train.lock"),
            std::string::npos)
      << second;
  EXPECT_NE(second.find("two jobs would write one set of checkpoints"), std::string::npos);
  TrainOptions elsewhere = tiny_options(dir, "other");  // another directory is another job
  EXPECT_NO_THROW(Trainer{elsewhere});
  first.reset();
  EXPECT_NO_THROW(Trainer{o});
}

TEST(Trainer, LiveProgressIsRedrawnInPlaceAndClearedAtTheEnd) {
  ScratchDir dir;
  write_corpus_shards(dir);
  TrainOptions o = tiny_options(dir, "run");
  o.log_every = 4;
  std::ostringstream out;
  Trainer t(o);
  t.set_live_progress(true);
  t.fit(&out);
  const std::string s = out.str();
  const std::string clear = "\r\x1b[2K";
  // One redraw per step, after the erase sequence (or, on steps 4 and 8, after the plain line
  // printed in its place), and the line erased once the loop ends.
  for (int step = 1; step <= 8; ++step) {
    const std::string live = (step % 4 == 0 ? std::string("\n") : clear) + "step " +
                             std::to_string(step) + "/8 " + std::to_string(step * 100 / 8);
    EXPECT_NE(s.find(live), std::string::npos) << "no live line for step " << step;
  }
  EXPECT_NE(s.find(clear + "step 4/8 | loss"), std::string::npos) << "the plain line of step 4";
  EXPECT_EQ(s.substr(s.size() - clear.size()), clear);
  EXPECT_NE(s.find("| ETA 0:00:"), std::string::npos);

  // Without it (not a terminal) the output holds no control character.
  std::ostringstream plain;
  o.run_dir = dir / "plain";
  Trainer(o).fit(&plain);
  EXPECT_EQ(plain.str().find('\r'), std::string::npos);
  EXPECT_EQ(plain.str().find('\x1b'), std::string::npos);
}

TEST(Metrics, ClockTextAndProgressLine) {
  EXPECT_EQ(train::clock_text(0), "0:00:00");
  EXPECT_EQ(train::clock_text(83.4), "0:01:23");
  EXPECT_EQ(train::clock_text(3600 * 27 + 61), "27:01:01");
  EXPECT_EQ(train::clock_text(-1), "--:--");
  EXPECT_EQ(train::clock_text(std::nan("")), "--:--");
  train::StepMetrics m;
  m.step = 37;
  m.loss = 2.45123;
  m.tokens_per_s = 12345.4;
  EXPECT_EQ(m.progress_line(1000, 83, 2110),
            "step 37/1000 3.7% | loss 2.4512 | 12345 tok/s | elapsed 0:01:23 | ETA 0:35:10");
}

// MFU's CPU peak counts what the core's FMA pipes issue, not what its ISA names: Zen 4 runs
// AVX-512 over two 256-bit pipes (32 fp32 FLOP/cycle; it was counted 64, which halved MFU on
// it), Zen and Zen+ run AVX2 over two 128-bit pipes (16). Only the first processor is read.
TEST(Metrics, CpuPeakCountsTheFmaPipesOfTheCore) {
  auto cpu = [](const char* vendor, int family, int model, const char* flags) {
    return str_cat("processor\t: 0\nvendor_id\t: ", vendor, "\ncpu family\t: ", family,
                   "\nmodel\t\t: ", model, "\ncpu MHz\t\t: 2600.000\nflags\t\t: fpu sse2 ", flags,
                   "\n\nprocessor\t: 1\nflags\t\t: fpu avx512f avx2 fma\n");
  };
  struct Case {
    std::string cpuinfo;
    int per_cycle;
    const char* isa;
  } cases[] = {
      {cpu("AuthenticAMD", 25, 17, "avx2 fma avx512f avx512_vnni"), 32, "Zen 4"},
      {cpu("AuthenticAMD", 26, 2, "avx2 fma avx512f"), 64, "two 512-bit pipes"},
      {cpu("GenuineIntel", 6, 85, "avx2 fma avx512f avx512cd"), 64, "two 512-bit pipes"},
      {cpu("AuthenticAMD", 25, 1, "avx2 fma"), 32, "two 256-bit pipes"},   // Zen 3
      {cpu("AuthenticAMD", 23, 49, "avx2 fma"), 32, "two 256-bit pipes"},  // Zen 2 (0x31)
      {cpu("AuthenticAMD", 23, 1, "avx2 fma"), 16, "Zen's two 128-bit"},   // Zen (0x01)
      {cpu("GenuineIntel", 6, 63, "avx2 fma"), 32, "two 256-bit pipes"},   // Haswell
      {cpu("GenuineIntel", 6, 63, "avx2"), 8, "SSE"},                      // no FMA flag
      {cpu("GenuineIntel", 6, 63, "avx512fx"), 8, "SSE"},                  // a flag is a whole word
  };
  for (const Case& c : cases) {
    std::string isa;
    EXPECT_EQ(train::cpu_fp32_flops_per_cycle(c.cpuinfo, &isa), c.per_cycle) << c.cpuinfo;
    EXPECT_NE(isa.find(c.isa), std::string::npos) << isa;
  }
}

TEST(Metrics, TruncateDropsLaterAndTornLines) {
  ScratchDir dir;
  std::string path = dir / "m.jsonl";
  write_file_atomic(path, std::string("{\"step\":1}\n{\"step\":2}\n{\"step\":3}\n{\"step\":"));
  MetricsLog::truncate_after(path, 2);
  EXPECT_EQ(read_text_file(path), "{\"step\":1}\n{\"step\":2}\n");
}

// Every format carries its version, and a newer one is refused in one line naming the file
// (or field) and this build's version: the run's config.json, metrics.jsonl's lines.
TEST(Versions, ConfigAndMetricsCarryAVersionAndRefuseANewerOne) {
  ScratchDir dir;
  TrainOptions o = tiny_options(dir, "run");
  const nlohmann::json file = o.to_config_file();
  EXPECT_EQ(file.at("config_version"), train::kConfigVersion);
  TrainOptions back;
  back.update_from_json(file);  // its own file reads back
  EXPECT_EQ(back.to_json(), o.to_json());
  using tessera::testing::error_of;
  std::string msg = error_of([&] {
    back.update_from_json({{"config_version", train::kConfigVersion + 1}});
  });
  EXPECT_NE(msg.find("config: 'config_version': tessera-config version 2 is newer than this "
                     "Tessera (" +
                     std::string(version()) + ")"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  msg = error_of([&] { back.update_from_json({{"config_version", "1"}}); });
  EXPECT_NE(msg.find("\"1\" is not a tessera-config version"), std::string::npos) << msg;

  const std::string path = dir / "m.jsonl";
  {
    MetricsLog log(path);
    log.append({{"step", 1}, {"loss", 2.5}});
  }
  const nlohmann::json line = nlohmann::json::parse(read_text_file(path));
  EXPECT_EQ(line.at("metrics_version"), train::kMetricsVersion);
  write_file_atomic(path, read_text_file(path) + "{\"step\":2,\"metrics_version\":9}\n");
  msg = error_of([&] { MetricsLog::truncate_after(path, 5); });
  EXPECT_NE(msg.find(path + " line 2 'metrics_version': tessera-metrics version 9 is newer"),
            std::string::npos)
      << msg;
}

}  // namespace
}  // namespace tessera::cli::testing
