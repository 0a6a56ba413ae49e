// `tessera generate --tp`, run in-process on every rank through the command's own parser and
// callback (tools/cli): a full single-process checkpoint loads into the tensor-parallel model,
// every rank generates, only rank 0 prints, and what it prints is the single-process text for
// greedy and seeded sampling. Also the one-line errors of a layout that does not fit.
//
// The model's weights are drawn with std 0.3 (tp_test_util's randomize) so that the logits are
// far from ties: tensor parallelism changes them by f32 rounding of reordered sums (~1e-6,
// tp_model_test.cpp), which can only change a token whose top logits (greedy) or whose
// cumulative probability at the uniform draw (sampling) sit that close.

#include <CLI/CLI.hpp>

#include <filesystem>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cli/commands.h"
#include "tessera/nn/io/checkpoint.h"
#include "tessera/nn/io/sharded_checkpoint.h"
#include "tessera/parallel/comm/mpi_communicator.h"
#include "tessera/train/detail/model_source.h"
#include "tests/nn/hf_llama_folder.h"
#include "tests/nn/io_test_util.h"
#include "tests/parallel/tp_test_util.h"

namespace tessera::parallel {
namespace {

namespace fs = std::filesystem;

struct CliResult {
  std::string out, err;  // what this rank printed
  std::string error;     // the error that reached main(), "" if none
  int code = 0;          // the exit code main() would return
};

// `tessera <args>` on this rank, as main() runs it (MPI is already up under the test's main).
CliResult run_cli(const std::string& args) {
  CLI::App app;
  cli::add_generate_command(app);
  cli::exit_code() = 0;
  std::ostringstream out, err;
  std::streambuf* old_out = std::cout.rdbuf(out.rdbuf());
  std::streambuf* old_err = std::cerr.rdbuf(err.rdbuf());
  CliResult r;
  try {
    app.parse(args, false);
  } catch (const Error& e) {
    r.error = e.what();
  }
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  r.out = out.str();
  r.err = err.str();
  r.code = r.error.empty() ? cli::exit_code() : 1;
  return r;
}

nn::GPTConfig tiny_config() {
  nn::GPTConfig c;
  c.vocab_size = 257;  // the byte tokenizer's
  c.block_size = 32;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.init_seed = 3;
  return c;
}

// A checkpoint of `model` that records the byte tokenizer, written by rank 0 into a folder
// named for the test; every rank returns its path once it exists.
std::string write_checkpoint(const nn::GPT& model, const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("tessera_tp_generate_" + name);
  auto world = MpiCommunicator::world();
  if (world->rank() == 0) {
    fs::remove_all(dir);
    nn::CheckpointData data;
    data.step = 1;
    data.model = model.state_dict();
    data.state["model_config"] = model.config().to_json();
    data.state["options"]["tokenizer"] = "byte";
    nn::save_checkpoint(dir.string(), data);
  }
  world->barrier();
  return dir.string();
}

// A sharded set of `dir`'s newest checkpoint, cut into 3 shards, written by rank 0 into a run
// folder named for the test; every rank returns the run's path once it exists.
std::string write_sharded_copy(const std::string& dir, const std::string& name) {
  const fs::path run = fs::temp_directory_path() / ("tessera_tp_generate_" + name + "_sharded");
  auto world = MpiCommunicator::world();
  if (world->rank() == 0) {
    fs::remove_all(run);
    nn::save_sharded_checkpoint(run.string(), nn::load_checkpoint(*nn::find_latest_checkpoint(dir)),
                                3);
  }
  world->barrier();
  return run.string();
}

// What the single-process command prints for `samples` samples of `new_tokens` after `prompt`.
std::string single_process_text(nn::GPT& model, const std::string& prompt, int64_t new_tokens,
                                const nn::SamplingOptions& sampling, int64_t samples) {
  data::ByteTokenizer tok;
  const std::vector<int32_t> p = tok.encode(prompt);
  const Tensor ids =
      from_vector<int64_t>(std::vector<int64_t>(p.begin(), p.end()), {1, int64_t(p.size())});
  std::string text;
  for (int64_t i = 0; i < samples; ++i) {
    nn::GenerateOptions g;
    g.max_new_tokens = new_tokens;
    g.sampling = sampling;
    g.sampling.seed = sampling.seed + uint64_t(i);
    const std::vector<int64_t> all = to_vector<int64_t>(nn::generate(model, ids, g));
    if (samples > 1) text += "--- sample " + std::to_string(i + 1) + " ---\n";
    text += tok.decode(std::vector<int32_t>(all.begin(), all.end())) + "\n";
  }
  return text;
}

TEST(TensorParallelGenerateN2, GreedyAndSampledTextMatchOneProcess) {
  const int rank = MpiCommunicator::world()->rank();
  nn::GPT single(tiny_config());
  testing::randomize(single, 17);
  const std::string dir = write_checkpoint(single, "match");
  const std::string base = "generate --model " + dir + " --tp 2 --prompt hello --max-new-tokens 12";

  nn::SamplingOptions greedy;
  greedy.temperature = 0;
  CliResult r = run_cli(base + " --temperature 0");
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.code, 0);
  if (rank == 0) {
    EXPECT_EQ(r.out, single_process_text(single, "hello", 12, greedy, 1));
    EXPECT_NE(r.err.find("tensor parallel over 2 ranks"), std::string::npos) << r.err;
  } else {
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "");
  }

  // Seeded sampling, two samples, with and without the KV cache.
  nn::SamplingOptions sampled;
  sampled.temperature = 0.9;
  sampled.top_k = 40;
  sampled.seed = 7;
  const std::string want = single_process_text(single, "hello", 12, sampled, 2);
  for (const char* cache : {"", " --no-cache"}) {
    r = run_cli(base + " --temperature 0.9 --top-k 40 --seed 7 --num-samples 2" + cache);
    EXPECT_EQ(r.code, 0) << r.error;
    EXPECT_EQ(r.out, rank == 0 ? want : "") << cache;
  }
  MpiCommunicator::world()->barrier();
  if (rank == 0) fs::remove_all(dir);
}

// Every tensor of `model`, rank `rank`'s part of `size`, is exactly shard_of of full(name).
void expect_slices_of(const nn::GPT& model, const std::function<Tensor(const std::string&)>& full,
                      int rank, int size, const std::string& what) {
  const auto metas = model.named_parameter_meta();
  for (const auto& [name, t] : model.state_dict()) {
    nn::ParamMeta meta;
    for (const auto& [n, mt] : metas)
      if (n == name) meta = mt;
    EXPECT_EQ(to_vector<float>(t),
              to_vector<float>(nn::shard_of(full(name), meta, rank, size, name)))
        << what << " " << name;
  }
}

// A tensor-parallel rank reads only its slices of a checkpoint, unsharded
// (tp::read_full_source) or a sharded set of 3 ranks (tp::read_full_sharded_set): the
// load holds no more than the rank's model, and the model's tensors are exactly shard_of of
// the checkpoint's. Before, every rank read the whole model into a state dict and then copied
// its slices: at tp2 this model's loads peaked at 3,326,976 (unsharded) and 4,172,800 bytes
// (the set) against the bound's 849,920 (its model: 845,824 of the whole 1,635,328).
TEST(TensorParallelGenerateN2, EachRankReadsOnlyItsSlicesOfTheCheckpoint) {
  const int rank = MpiCommunicator::world()->rank();
  nn::GPTConfig cfg = tiny_config();
  cfg.n_embd = 128;
  cfg.n_head = 4;
  cfg.n_kv_head = 2;
  nn::GPT single(cfg);
  testing::randomize(single, 5);
  const std::string dir = write_checkpoint(single, "slices");
  const fs::path sharded_run = write_sharded_copy(dir, "slices");
  const auto tp = testing::make_tp(2, false);

  for (const std::string& spec : {dir, sharded_run.string()}) {
    Allocator& host = allocator_for(Device::cpu());
    const int64_t before = host.stats().live_bytes;
    host.reset_peak();
    const train::LoadedModel m = train::load_model(spec, 0, tp);
    const int64_t peak = host.stats().peak_bytes - before;
    int64_t local = 0, whole = 0;
    for (const auto& [name, t] : m.model->state_dict()) local += int64_t(t.nbytes());
    for (const auto& [name, t] : single.state_dict()) whole += int64_t(t.nbytes());
    if (rank == 0)
      std::printf("  tp2 load of %s, rank 0: peak %lld bytes, its model %lld, the whole %lld\n",
                  spec == dir ? "a checkpoint" : "a sharded set", (long long)peak, (long long)local,
                  (long long)whole);
    EXPECT_LE(peak, local + 4096) << spec;  // the model's tensors and a little bookkeeping
    expect_slices_of(
        *m.model,
        [&](const std::string& name) { return nn::find_tensor(single.state_dict(), name); }, rank,
        2, spec);
  }
  MpiCommunicator::world()->barrier();
  if (rank == 0) {
    fs::remove_all(dir);
    fs::remove_all(sharded_run);
  }
}

// The ranks checksum a share of the files each (nn::ChecksumShare; of a single-process
// checkpoint the model file falls to rank 0, of a three-shard set shards 0 and 2 to rank 0 and
// shard 1 to rank 1) and agree: a file one rank found corrupt fails the load on both, naming
// it and that rank. Without the agreement the other rank loads and goes on alone.
TEST(TensorParallelGenerateN2, AFileOneRankChecksumsFailsTheLoadOnBoth) {
  const int rank = MpiCommunicator::world()->rank();
  nn::GPT single(tiny_config());
  testing::randomize(single, 6);
  const std::string dir = write_checkpoint(single, "agree");
  const fs::path sharded_run = write_sharded_copy(dir, "agree");
  const std::string checkpoint = *nn::find_latest_checkpoint(dir);
  const std::string set =
      (fs::path(nn::checkpoints_dir(sharded_run.string())) / fs::path(checkpoint).filename())
          .string();
  const std::string model = checkpoint + "/model.safetensors",
                    shard = set + "/shard_00001.safetensors";
  if (rank == 0)
    for (const std::string& file : {model, shard}) nn::testing::flip_a_data_bit(file);
  MpiCommunicator::world()->barrier();
  const auto tp = testing::make_tp(2, false);
  for (const auto& [spec, file, by] :
       {std::tuple{checkpoint, model, "(on rank 0)"}, std::tuple{set, shard, "(on rank 1)"}}) {
    std::string error;
    try {
      train::load_model(spec, 0, tp);
    } catch (const Error& e) {
      error = e.what();
    }
    EXPECT_NE(error.find(file), std::string::npos) << "rank " << rank << ": " << error;
    EXPECT_NE(error.find("checksum"), std::string::npos) << "rank " << rank << ": " << error;
    EXPECT_NE(error.find(by), std::string::npos) << "rank " << rank << ": " << error;
  }
  MpiCommunicator::world()->barrier();
  if (rank == 0) {
    fs::remove_all(dir);
    fs::remove_all(sharded_run);
  }
}

// Hugging Face Llama weights as transformers shards them (bf16, three files and an index) load
// by range (nn::hf_llama_source): one process reads each tensor straight into its model, cast
// from bf16 through a buffer of SafetensorsReader::kCastChunkElements, and a tensor-parallel
// rank reads only its slices. The control reads the folder whole and then loads or slices it,
// as GPT-2 and llm.c weights still load: it fails the bound. The load before (the folder read
// whole, mapped to Tessera's names, then loaded or sliced) peaked at 2,854,656 bytes in one
// process and 2,528,256 at tp2, against these bounds' 2,038,272 and 1,120,768.
TEST(TensorParallelGenerateN2, HuggingFaceLlamaShardsLoadByRangeIntoEachRank) {
  const int rank = MpiCommunicator::world()->rank();
  const nn::GPTConfig cfg = nn::testing::byte_llama_config(128);
  nn::GPT single(cfg);
  testing::randomize(single, 9);
  const fs::path dir = fs::temp_directory_path() / "tessera_tp_generate_hf_llama";
  if (rank == 0) {
    fs::remove_all(dir);
    nn::testing::write_hf_llama_shards(dir.string(), single.state_dict(), cfg, 3, DType::bf16);
  }
  MpiCommunicator::world()->barrier();
  const int64_t chunk = nn::SafetensorsReader::kCastChunkElements * 2;  // bf16 elements

  for (const bool split : {false, true}) {
    const auto tp = split ? testing::make_tp(2, false) : nullptr;
    Allocator& host = allocator_for(Device::cpu());
    const int64_t before = host.stats().live_bytes;
    host.reset_peak();
    const train::LoadedModel m = train::load_model(dir.string(), 0, tp);
    const int64_t peak = host.stats().peak_bytes - before;
    int64_t local = 0;
    for (const auto& [name, t] : m.model->state_dict()) local += int64_t(t.nbytes());
    const int64_t bound = local + chunk + 4096;  // the model, one cast buffer, bookkeeping
    EXPECT_LE(peak, bound) << split;
    const int64_t live = host.stats().live_bytes;
    host.reset_peak();
    {
      nn::ModelParallel mp;
      mp.tp = tp;
      nn::GPT whole(m.config, DType::f32, mp, nn::ParamInit::zeros);
      const nn::StateDict read = nn::hf_llama_source(dir.string(), nullptr)->read_all();
      parallel::tp::load_full_state_dict(whole, read, split ? rank : 0, split ? 2 : 1);
    }
    const int64_t control = host.stats().peak_bytes - live;
    EXPECT_GT(control, bound) << split << ": the control no longer reads the folder whole";
    if (rank == 0)
      std::printf(
          "  %s load of HF Llama shards, rank 0: peak %lld bytes (bound %lld), read "
          "whole %lld\n",
          split ? "tp2" : "one-process", (long long)peak, (long long)bound, (long long)control);
    EXPECT_EQ(m.config.ffn_dim(), cfg.ffn_dim());
    expect_slices_of(
        *m.model,
        [&](const std::string& name) {
          return nn::testing::folder_weight(single.state_dict(), name, cfg, DType::bf16);
        },
        split ? rank : 0, split ? 2 : 1, split ? "tp2" : "one process");
  }
  MpiCommunicator::world()->barrier();
  if (rank == 0) fs::remove_all(dir);
}

TEST(TensorParallelGenerateN2, LayoutErrorsAreOneLineFromRankZero) {
  const int rank = MpiCommunicator::world()->rank();
  nn::GPTConfig cfg = tiny_config();
  const std::string dir = write_checkpoint(nn::GPT(cfg), "errors");
  cfg.n_head = cfg.n_kv_head = 3;
  cfg.n_embd = 24;
  const std::string odd = write_checkpoint(nn::GPT(cfg), "odd_heads");

  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {"--model " + dir + " --tp 3", "generate: --tp 3 needs 3 processes but 2 are running"},
      {"--model " + dir, "generate: --tp 1 needs 1 process but 2 are running"},
      {"--model " + odd + " --tp 2",
       "n_head (3) must be divisible by the tensor-parallel size (2)"},
  };
  for (const Case& c : cases) {
    const CliResult r = run_cli("generate " + c.args + " --max-new-tokens 2");
    EXPECT_EQ(r.code, 1) << c.args;
    EXPECT_EQ(r.out, "") << c.args;
    if (rank == 0) {
      EXPECT_NE(r.error.find(c.message), std::string::npos) << r.error;
      EXPECT_EQ(r.error.find('\n'), std::string::npos) << r.error;
    } else {
      EXPECT_EQ(r.error, "") << "only rank 0 reports: " << c.args;
    }
  }
  MpiCommunicator::world()->barrier();
  if (rank == 0) {
    fs::remove_all(dir);
    fs::remove_all(odd);
  }
}

}  // namespace
}  // namespace tessera::parallel
