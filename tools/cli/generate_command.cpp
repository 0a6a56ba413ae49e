// `tessera generate`: sample text from a run, a checkpoint, HF GPT-2 weights or an llm.c file.
//
// Under tensor parallelism (`mpiexec -n T tessera generate --tp T ...`) every rank loads its
// slices of the same full weights, runs the same decode loop (the logits are gathered, so every
// rank samples the same tokens) and only rank 0 prints. The tokens are those of one process up
// to the rounding of the reordered sums in the logits.

#include <iostream>

#include "cli/commands.h"
#include "tessera/parallel/mesh.h"
#include "tessera/parallel/tp/tensor_parallel.h"
#include "tessera/tessera.h"
#include "tessera/train/detail/model_source.h"
#if TESSERA_HAS_MPI
#include "tessera/parallel/comm/mpi_communicator.h"
#endif

namespace tessera::cli {

using train::load_model;
using train::LoadedModel;
using train::ModelSourceKind;

namespace {

struct GenerateFlags {
  std::string model, tokenizer, prompt = "\n";
  int64_t max_new_tokens = 200, top_k = 40, num_samples = 1, n_head = 0;
  double temperature = 0.8, top_p = 1.0;
  uint64_t seed = 0;
  int threads = 0, tp = 1;
  bool no_cache = false;
};

// MPI's world when an MPI launcher started the program (main() then initialised MPI), else null.
std::shared_ptr<parallel::Communicator> mpi_world() {
#if TESSERA_HAS_MPI
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized != 0) return parallel::MpiCommunicator::world();
#endif
  return nullptr;
}

// The tensor-parallel group for --tp: none for --tp 1 in one process; otherwise every process,
// which must be exactly --tp of them (generate has no other parallel axis).
std::shared_ptr<parallel::tp::TensorParallel> make_tp_group(int tp) {
  TESSERA_CHECK(tp >= 1, "generate: --tp must be at least 1, got ", tp);
  const std::shared_ptr<parallel::Communicator> mpi = mpi_world();
  const int world = mpi ? mpi->size() : 1;
  TESSERA_CHECK(world == tp, "generate: --tp ", tp, " needs ", tp,
                tp == 1 ? " process" : " processes", " but ", world, world == 1 ? " is" : " are",
                " running; start it as mpiexec -n ", tp, " tessera generate --tp ", tp, " ...");
  if (tp == 1) return nullptr;
  auto mesh = std::make_shared<parallel::DeviceMesh>(mpi, parallel::MeshShape{1, 1, tp});
  return parallel::tp::TensorParallel::from_mesh(mesh, false);
}

void generate_on_rank(const GenerateFlags& f, bool prints) {
  LoadedModel loaded = load_model(f.model, f.n_head, make_tp_group(f.tp));
  std::unique_ptr<data::Tokenizer> tokenizer =
      train::model_tokenizer(loaded, f.tokenizer, "generate");
  TESSERA_CHECK(tokenizer->vocab_size() <= loaded.config.vocab_size, "generate: the tokenizer has ",
                tokenizer->vocab_size(), " ids but the model's vocab_size is ",
                loaded.config.vocab_size);
  std::vector<int32_t> prompt = tokenizer->encode(f.prompt);
  TESSERA_CHECK(!prompt.empty(), "generate: the prompt encodes to no tokens; pass --prompt");
  int64_t room = loaded.config.block_size - int64_t(prompt.size());
  TESSERA_CHECK(room > 0, "generate: the prompt (", prompt.size(),
                " tokens) fills the model's context of ", loaded.config.block_size);
  int64_t n = std::min(f.max_new_tokens, room);
  std::vector<int64_t> ids(prompt.begin(), prompt.end());
  if (prints)
    std::cerr << "generate: " << loaded.path << " (" << nn::GPT::count_parameters(loaded.config)
              << " parameters"
              << (f.tp > 1 ? ", tensor parallel over " + std::to_string(f.tp) + " ranks" : "")
              << "), " << n << " new tokens per sample\n";
  for (int64_t i = 0; i < f.num_samples; ++i) {
    nn::GenerateOptions g;
    g.max_new_tokens = n;
    g.use_cache = !f.no_cache;
    g.sampling.temperature = f.temperature;
    g.sampling.top_k = f.top_k;
    g.sampling.top_p = f.top_p;
    g.sampling.seed = f.seed + uint64_t(i);
    Tensor out =
        nn::generate(*loaded.model, from_vector<int64_t>(ids, {1, int64_t(ids.size())}), g);
    std::vector<int64_t> all = to_vector<int64_t>(out);
    std::vector<int32_t> tokens(all.begin(), all.end());
    if (!prints) continue;
    if (f.num_samples > 1) std::cout << "--- sample " << i + 1 << " ---\n";
    std::cout << tokenizer->decode(tokens) << "\n";
  }
}

void run_generate(const GenerateFlags& f) {
  if (f.threads > 0) set_num_threads(f.threads);
  const std::shared_ptr<parallel::Communicator> mpi = mpi_world();
  const int rank = mpi ? mpi->rank() : 0;
  try {
    generate_on_rank(f, rank == 0);
  } catch (const Error&) {
    // Every rank runs the same checks on the same flags, files and gathered logits, so an error
    // (a layout that does not fit, a bad checkpoint) is the same on every rank: rank 0 reports
    // it in one line, the others only fail.
    if (rank == 0) throw;
    exit_code() = 1;
  }
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "Sample text from a trained or imported model");
  cmd->add_option("--model", f->model,
                  "a run directory, a checkpoint directory, HF GPT-2 weights or an llm.c .bin")
      ->required();
  cmd->add_option("--tokenizer", f->tokenizer, "tokenizer (default: the one the run trained with)");
  cmd->add_option("--prompt", f->prompt, "text to continue");
  cmd->add_option("--max-new-tokens", f->max_new_tokens, "tokens to generate per sample");
  cmd->add_option("--temperature", f->temperature, "0 is greedy");
  cmd->add_option("--top-k", f->top_k, "keep the k most likely tokens (0: all)");
  cmd->add_option("--top-p", f->top_p, "nucleus sampling threshold (1: off)");
  cmd->add_option("--seed", f->seed, "sampling seed");
  cmd->add_option("--num-samples", f->num_samples, "samples to print");
  cmd->add_option("--n-head", f->n_head, "heads of HF weights without a config.json");
  cmd->add_option("--threads", f->threads, "CPU threads (0: all)");
  cmd->add_flag("--no-cache", f->no_cache, "recompute the sequence for every token");
  cmd->add_option("--tp", f->tp,
                  "tensor-parallel ranks: run as mpiexec -n T tessera generate --tp T");
  cmd->callback([f] { run_generate(*f); });
}

}  // namespace tessera::cli
