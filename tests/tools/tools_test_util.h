#pragma once
// Shared by the trainer and command-line tests: a scratch folder with token shards of a small
// synthetic corpus, and options for a model small enough to train in a second.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tessera/tessera.h"
#include "tessera/train/trainer.h"

namespace tessera::cli::testing {

using train::FitResult;
using train::MetricsLog;
using train::Trainer;
using train::TrainOptions;

namespace fs = std::filesystem;

// A fresh folder under the system temp dir, named for the test, removed when the test ends.
// The ranks of an MPI test name the same folder; only its owner (rank 0) creates and removes it.
class ScratchDir {
 public:
  explicit ScratchDir(bool owner = true) : owner_(owner) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() /
            (std::string("tessera_tools_") + info->test_suite_name() + "_" + info->name());
    if (!owner_) return;
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    if (owner_) fs::remove_all(path_);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  bool owner_ = true;
};

// Writes a few kilobytes of patterned text and byte-tokenizes it into train and val shards.
inline void write_corpus_shards(const ScratchDir& dir) {
  fs::create_directories(dir / "text");
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += "line " + std::to_string(i % 37) + ": the quick brown fox jumps over " +
            std::to_string((i * 7) % 11) + " lazy dogs.\n";
  write_file_atomic(dir / "text/corpus.txt", text);
  data::PrepareOptions p;
  p.inputs = {dir / "text"};
  p.output_dir = dir / "data";
  p.val_fraction = 0.2;
  p.tokenizer_source = "byte";
  data::prepare_shards(data::ByteTokenizer(), p);
}

// A 2-layer model at width 32 with dropout (so resuming must also reproduce the masks).
inline TrainOptions tiny_options(const ScratchDir& dir, const std::string& run) {
  TrainOptions o;
  o.train_data = dir / "data/data_train_*.bin";
  o.val_data = dir / "data/data_val_*.bin";
  o.model_overrides = {{"n_layer", 2}, {"n_head", 2},      {"n_kv_head", 2},
                       {"n_embd", 32}, {"block_size", 32}, {"dropout", 0.1}};
  o.batch_size = 4;
  o.seq_len = 16;
  o.grad_accum = 2;
  o.max_steps = 8;
  o.lr = 3e-3;
  o.warmup_steps = 2;
  o.eval_every = 4;
  o.eval_batches = 2;
  o.checkpoint_every = 4;
  o.keep_checkpoints = 0;
  o.run_dir = dir / run;
  o.threads = 1;
  return o;
}

// No validation split: the evaluation options go back to their defaults, since a run without
// --val-data refuses them (nothing would read them).
inline void drop_validation(TrainOptions& o) {
  o.val_data.clear();
  o.eval_every = 0;
  o.eval_batches = TrainOptions().eval_batches;
}

}  // namespace tessera::cli::testing
