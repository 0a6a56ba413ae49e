// `tessera generate`: sample text from a run, a checkpoint, Hugging Face GPT-2 or Llama weights
// or an llm.c file.
//
// Under tensor parallelism (`mpiexec -n T tessera generate --tp T ...`) every rank loads its
// slices of the same full weights, runs the same decode loop (the logits are gathered, so every
// rank samples the same tokens) and only rank 0 prints. The tokens are those of one process up
// to the rounding of the reordered sums in the logits.

#include <iostream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/tp_group.h"
#include "tessera/core/file_io.h"
#include "tessera/cuda/cuda.h"
#include "tessera/nn/completion.h"
#include "tessera/tessera.h"
#include "tessera/train/detail/device.h"
#include "tessera/train/detail/model_source.h"

namespace tessera::cli {

using train::load_model;
using train::LoadedModel;
using train::ModelSourceKind;

namespace {

struct GenerateFlags {
  std::string model, tokenizer, prompt = "\n", prompts_file, device = "cpu";
  std::vector<std::string> stop;
  int64_t max_new_tokens = 200, top_k = 40, num_samples = 1, n_head = 0;
  double temperature = 0.8, top_p = 1.0;
  int64_t seed = 0;  // signed, so that -1 is refused rather than read as 2^64 - 1
  int threads = 0, tp = 1;
  bool no_cache = false, no_eos = false, int8_activations = false;
};

// Generates for `prompts` (encoded) as batches of equal length (the KV cache holds one length
// per batch); every prompt's completion ends at its own end-of-text token or stop string, and a
// batch ends when all of its rows have.
std::vector<nn::Completion> complete(nn::GPT& model,
                                     const std::vector<std::vector<int32_t>>& prompts,
                                     const data::Tokenizer& tok, const GenerateFlags& f,
                                     uint64_t seed) {
  std::vector<nn::Completion> out;
  for (size_t i = 0; i < prompts.size(); ++i)
    out.emplace_back(tok, nn::StopConditions{!f.no_eos, f.stop});
  std::map<size_t, std::vector<size_t>> by_length;
  for (size_t i = 0; i < prompts.size(); ++i) by_length[prompts[i].size()].push_back(i);
  for (const auto& [length, rows] : by_length) {
    const int64_t room = model.config().block_size - int64_t(length);
    TESSERA_CHECK(room > 0, "generate: a prompt of ", length,
                  " tokens fills the model's context of ", model.config().block_size);
    std::vector<int64_t> ids;
    for (size_t r : rows) ids.insert(ids.end(), prompts[r].begin(), prompts[r].end());
    nn::GenerateOptions g;
    g.max_new_tokens = std::min(f.max_new_tokens, room);
    g.use_cache = !f.no_cache;
    g.sampling.temperature = f.temperature;
    g.sampling.top_k = f.top_k;
    g.sampling.top_p = f.top_p;
    g.sampling.seed = seed;
    g.on_step = [&](int64_t, std::span<const int64_t> chosen) {
      bool all_done = true;
      for (size_t k = 0; k < rows.size(); ++k) {
        out[rows[k]].add(chosen[k]);
        all_done = all_done && out[rows[k]].done();
      }
      return !all_done;
    };
    nn::generate(model, from_vector<int64_t>(ids, {int64_t(rows.size()), int64_t(length)}), g);
  }
  for (nn::Completion& c : out) c.finish();
  return out;
}

void generate_on_rank(const GenerateFlags& f, bool prints) {
  TESSERA_CHECK(f.device == "cpu" || f.tp == 1, "generate: --device ", f.device, " with --tp ",
                f.tp,
                " is not supported (tensor-parallel generation runs on the "
                "CPU); use one of them");
  LoadedModel loaded = load_model(f.model, f.n_head, make_tp_group(f.tp, "generate"));
  if (f.int8_activations) use_int8_activations(*loaded.model, f.model, "generate");
  if (f.device != "cpu") {
    const Device device = train::open_train_device(f.device, 0, "generate");
    nn::move_to_device(loaded.model->state_dict(), device);
  }
  std::unique_ptr<data::Tokenizer> tokenizer =
      train::model_tokenizer(loaded, f.tokenizer, "generate");
  TESSERA_CHECK(tokenizer->vocab_size() <= loaded.config.vocab_size, "generate: the tokenizer has ",
                tokenizer->vocab_size(), " ids but the model's vocab_size is ",
                loaded.config.vocab_size);
  for (const std::string& s : f.stop)
    TESSERA_CHECK(!s.empty(), "generate: --stop must not be empty");

  if (!f.prompts_file.empty()) {
    // One prompt per line; one JSON line per prompt out, in the file's order.
    std::vector<std::string> texts;
    std::istringstream in(read_text_file(f.prompts_file));
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) texts.push_back(line);
    TESSERA_CHECK(!texts.empty(), "generate: ", f.prompts_file, " holds no prompt");
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < texts.size(); ++i) {
      prompts.push_back(tokenizer->encode(texts[i]));
      TESSERA_CHECK(!prompts.back().empty(), "generate: ", f.prompts_file, " line ", i + 1,
                    " encodes to no tokens");
    }
    const std::vector<nn::Completion> done =
        complete(*loaded.model, prompts, *tokenizer, f, uint64_t(f.seed));
    if (!prints) return;
    for (size_t i = 0; i < texts.size(); ++i)
      std::cout << nlohmann::json({{"prompt", texts[i]},
                                   {"completion", done[i].text()},
                                   {"tokens", done[i].tokens().size()},
                                   {"finish_reason", done[i].finish_reason()}})
                       .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
    return;
  }

  std::vector<int32_t> prompt = tokenizer->encode(f.prompt);
  TESSERA_CHECK(!prompt.empty(), "generate: the prompt encodes to no tokens; pass --prompt");
  TESSERA_CHECK(loaded.config.block_size > int64_t(prompt.size()), "generate: the prompt (",
                prompt.size(), " tokens) fills the model's context of ", loaded.config.block_size);
  if (prints)
    std::cerr << "generate: " << loaded.path << " (" << nn::GPT::count_parameters(loaded.config)
              << " parameters"
              << (f.tp > 1 ? ", tensor parallel over " + std::to_string(f.tp) + " ranks" : "")
              << (f.device != "cpu" ? ", on " + f.device : std::string()) << "), up to "
              << std::min<int64_t>(f.max_new_tokens, loaded.config.block_size - prompt.size())
              << " new tokens per sample\n";
  for (int64_t i = 0; i < f.num_samples; ++i) {
    const std::vector<nn::Completion> done =
        complete(*loaded.model, {prompt}, *tokenizer, f, uint64_t(f.seed + i));
    if (!prints) continue;
    if (f.num_samples > 1) std::cout << "--- sample " << i + 1 << " ---\n";
    std::cout << tokenizer->decode(prompt) << done[0].text() << "\n";
  }
}

// Sizes out of range, and flags that --prompts-file leaves unread, before any model loads.
void check_generate_flags(const GenerateFlags& f) {
  TESSERA_CHECK(f.threads >= 0 && f.threads <= kMaxThreads, "generate: --threads must be in [0, ",
                kMaxThreads, "] (0: all), got ", f.threads);
  TESSERA_CHECK(f.num_samples >= 1, "generate: --num-samples must be positive, got ",
                f.num_samples);
  TESSERA_CHECK(f.seed >= 0, "generate: --seed must be >= 0, got ", f.seed);
  const GenerateFlags d;
  const char* unread = f.prompts_file.empty()           ? nullptr
                       : f.prompt != d.prompt           ? "--prompt"
                       : f.num_samples != d.num_samples ? "--num-samples"
                                                        : nullptr;
  TESSERA_CHECK(unread == nullptr, "generate: ", unread, " does not apply with --prompts-file ",
                "(one completion for each of its lines)");
  // Greedy decoding takes the most likely token; nothing cuts the distribution it never draws.
  const char* cut = f.temperature != 0   ? nullptr
                    : f.top_k != d.top_k ? "--top-k"
                    : f.top_p != d.top_p ? "--top-p"
                                         : nullptr;
  TESSERA_CHECK(cut == nullptr, "generate: ", cut, " does not apply with --temperature 0, ",
                "which takes the most likely token (greedy)");
}

void run_generate(const GenerateFlags& f) {
  check_generate_flags(f);
  if (f.threads > 0) set_num_threads(f.threads);
  // --device cuda-sim: the CUDA backend with every kernel in the CPU simulator.
  if (f.device == "cuda-sim") cuda::use_simulated_device();
  // Every rank also samples from the same gathered logits, so generation errors agree too.
  run_reporting_on_rank_zero([&](int rank) { generate_on_rank(f, rank == 0); });
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto f = std::make_shared<GenerateFlags>();
  CLI::App* cmd = app.add_subcommand("generate", "Sample text from a trained or imported model");
  cmd->add_option("--model", f->model,
                  "a run directory, a checkpoint directory, Hugging Face GPT-2 or Llama weights (a "
                  "folder) or an llm.c .bin")
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
  cmd->add_option("--prompts-file", f->prompts_file,
                  "one prompt per line, generated in batches; prints one JSON line per prompt "
                  "(prompt, completion, tokens, finish_reason)");
  cmd->add_option("--stop", f->stop, "end a completion at this string (repeatable); it is cut")
      ->allow_extra_args(false);
  cmd->add_flag("--no-eos", f->no_eos, "do not end a completion at the end-of-text token");
  cmd->add_flag("--int8-activations", f->int8_activations,
                "W8A8: quantize the linear layers' inputs to int8 per token too (a Q8_0 model)");
  cmd->add_option("--device", f->device, "cpu (default), cuda or cuda-sim (the simulated GPU)");
  cmd->add_option("--tp", f->tp,
                  "tensor-parallel ranks: run as mpiexec -n T tessera generate --tp T");
  cmd->callback([f] { run_generate(*f); });
}

}  // namespace tessera::cli
