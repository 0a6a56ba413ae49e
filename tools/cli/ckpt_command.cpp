// `tessera ckpt`: inspect a run, checkpoint or weights file; convert between formats.

#include <filesystem>
#include <iostream>
#include <optional>

#include "cli/ckpt_output.h"
#include "cli/commands.h"
#include "cli/live_line.h"
#include "tessera/data/hf_tokenizer.h"
#include "tessera/data/load_tokenizer.h"
#include "tessera/nn/io/hf_llama.h"
#include "tessera/tessera.h"
#include "tessera/train/detail/model_source.h"

namespace tessera::cli {

using train::load_model;
using train::LoadedModel;
using train::ModelSourceKind;

namespace {

const char* kind_name(ModelSourceKind k) {
  switch (k) {
    case ModelSourceKind::run_dir:
      return "run directory";
    case ModelSourceKind::checkpoint:
      return "checkpoint";
    case ModelSourceKind::hf_gpt2:
      return "Hugging Face GPT-2 weights";
    case ModelSourceKind::hf_llama:
      return "Hugging Face Llama weights";
    case ModelSourceKind::llmc:
      return "llm.c model file";
  }
  return "?";
}

void inspect(const std::string& spec, int64_t n_head) {
  LoadedModel m = load_model(spec, n_head);
  std::cout << "source: " << kind_name(m.kind) << " " << m.path << "\n";
  if (m.kind == ModelSourceKind::run_dir || m.kind == ModelSourceKind::checkpoint)
    std::cout << "step: " << m.step << "\n";
  std::cout << "model: " << m.config.to_json().dump() << "\n"
            << "parameters: " << m.model->num_parameters() << "\n";
  if (m.state.contains("options")) std::cout << "options: " << m.state["options"].dump() << "\n";
  if (m.state.contains("loader")) std::cout << "loader: " << m.state["loader"].dump() << "\n";
  for (const auto& [name, t] : m.model->named_parameters())
    std::cout << "  " << name << " " << t.describe() << "\n";
}

// A checkpoint directory, or a run directory's newest checkpoint that loads.
nn::LoadedCheckpoint load_training_checkpoint(const std::string& spec) {
  namespace fs = std::filesystem;
  if (fs::is_directory(fs::path(spec) / "checkpoints")) {
    std::vector<nn::SkippedCheckpoint> skipped;
    std::optional<nn::LoadedCheckpoint> newest = nn::load_newest_good_checkpoint(spec, &skipped);
    for (const nn::SkippedCheckpoint& s : skipped)
      std::cerr << "skipping checkpoint " << s.dir << ": " << s.reason << "\n";
    TESSERA_CHECK(newest.has_value(), "ckpt convert: run directory ", spec, " has no checkpoint");
    return std::move(*newest);
  }
  return {spec, nn::load_checkpoint(spec), nullptr};
}

// Between the two training-checkpoint formats, model, optimizer and state all kept: the
// output is a run directory whose newest checkpoint is the converted one, so `tessera train
// --run-dir <output>` resumes from it under any layout.
void convert_training(const std::string& spec, const std::string& to, const std::string& output,
                      int64_t shards) {
  LiveLine line;
  line.update(str_cat("ckpt: reading ", spec), /*force=*/true);
  const nn::LoadedCheckpoint in = load_training_checkpoint(spec);
  line.update(str_cat("ckpt: writing ", to, " step ", in.data.step, " to ", output), true);
  const std::string dir =
      to == "gathered"
          ? nn::save_checkpoint(output, in.data)
          : nn::save_sharded_checkpoint(output, in.data, int(shards), 0, [&](int done, int all) {
              line.update(str_cat("ckpt: wrote shard ", done, "/", all, " of step ", in.data.step),
                          /*force=*/done == all);
            });
  line.finish();
  std::cout << "ckpt: wrote " << dir << " (" << to
            << (to == "sharded" ? str_cat(", ", shards, " shards") : std::string()) << ", step "
            << in.data.step << ", from " << in.dir << ")\n";
}

void convert(const std::string& spec, const std::string& to, const std::string& output, bool bf16,
             int64_t n_head, int64_t shards) {
  TESSERA_CHECK(shards == 0 || to == "sharded", "ckpt convert: --shards ", shards,
                " applies to --to sharded only, got --to ", to);
  TESSERA_CHECK(!bf16 || to == "llmc", "ckpt convert: --bf16 applies to --to llmc only (the ",
                "other formats keep the model's dtypes), got --to ", to);
  if (to == "gathered" || to == "sharded") {
    TESSERA_CHECK(n_head == 0, "ckpt convert: --n-head does not apply to --to ", to,
                  " (a training checkpoint keeps its config)");
    TESSERA_CHECK(to == "gathered" || (shards >= 1 && shards <= 65536),
                  "ckpt convert: --to sharded needs --shards N (1 to 65536), got ", shards);
    check_new_run_dir(output, "ckpt convert");
    return convert_training(spec, to, output, shards);
  }
  if (to == "hf" || to == "llmc" || to == "safetensors")
    check_export_dir(to == "hf" ? output : std::filesystem::path(output).parent_path().string(),
                     output, "ckpt convert");
  LiveLine line;
  line.update(str_cat("ckpt: reading ", spec), /*force=*/true);
  LoadedModel m = load_model(spec, n_head);
  TESSERA_CHECK(m.config.quantization.empty(), "ckpt convert: ", spec, " holds quantized (",
                m.config.quantization, ") weights, which --to ", to,
                " cannot store; convert the full-precision model");
  nn::StateDict weights = m.model->state_dict();
  line.update(
      str_cat("ckpt: writing ", to, " (", m.model->num_parameters(), " parameters) to ", output),
      true);
  if (to == "hf") {
    // The tokenizer beside the weights, its end-of-text id in config.json: the folder is then
    // what AutoTokenizer and AutoModelForCausalLM load. A source with no tokenizer (HF or llm.c
    // weights given alone) exports the weights only.
    std::unique_ptr<data::Tokenizer> tok;
    nlohmann::json record;
    if (m.state.is_object() && m.state.contains("tokenizer")) {
      record = m.state["tokenizer"];
      tok = data::load_tokenizer_record(record, m.path);
    } else if (!m.tokenizer.empty() &&
               (m.tokenizer == "byte" || std::filesystem::exists(m.tokenizer))) {
      record = data::tokenizer_record(m.tokenizer);
      tok = data::load_tokenizer_record(record, m.tokenizer);
    }
    // GPT-2's architecture as GPT2LMHeadModel, a Llama-style one as LlamaForCausalLM.
    if (m.config.mlp == nn::MlpKind::swiglu)
      nn::export_hf_llama(output, weights, m.config, tok ? tok->eot_id() : -1);
    else
      nn::export_hf_gpt2(output, weights, m.config, tok ? tok->eot_id() : -1);
    if (tok) data::write_hf_tokenizer(output, record);
  } else if (to == "llmc") {
    nn::export_llmc_gpt2(output, weights, m.config,
                         bf16 ? nn::LlmcPrecision::bf16 : nn::LlmcPrecision::fp32);
  } else if (to == "safetensors") {
    nn::write_safetensors(output, weights,
                          {{"format", "pt"}, {"tessera_config", m.config.to_json().dump()}});
  } else {
    detail::throw_error("ckpt convert: --to must be hf, llmc, safetensors, gathered or sharded, ",
                        "got '", to, "'");
  }
  line.finish();
  std::cout << "ckpt: wrote " << output << " (" << to << ", " << m.model->num_parameters()
            << " parameters)\n";
}

}  // namespace

void add_ckpt_command(CLI::App& app) {
  struct Flags {
    std::string spec, to, output;
    bool bf16 = false;
    int64_t n_head = 0;
    int64_t shards = 0;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand("ckpt", "Inspect or convert checkpoints and weights");
  cmd->require_subcommand(1);
  CLI::App* ins = cmd->add_subcommand("inspect", "Print a model's config, step and tensors");
  ins->add_option("model", f->spec, "run dir, checkpoint dir, HF weights or llm.c .bin")
      ->required();
  ins->add_option("--n-head", f->n_head, "heads of HF weights without a config.json");
  ins->callback([f] { inspect(f->spec, f->n_head); });
  CLI::App* conv = cmd->add_subcommand("convert", "Write a model in another format");
  conv->add_option("model", f->spec, "run dir, checkpoint dir, HF weights or llm.c .bin")
      ->required();
  conv->add_option("--to", f->to,
                   "hf (folder for transformers), llmc (.bin), safetensors, or a training "
                   "checkpoint: gathered (the single-process format) or sharded (--shards N)")
      ->required();
  conv->add_option("--output", f->output,
                   "output path (gathered, sharded: a run directory to resume from)")
      ->required();
  conv->add_option("--shards", f->shards, "sharded: how many shard files");
  conv->add_flag("--bf16", f->bf16, "llmc: write bf16 weights (version 5)");
  conv->add_option("--n-head", f->n_head, "heads of HF weights without a config.json");
  conv->callback([f] { convert(f->spec, f->to, f->output, f->bf16, f->n_head, f->shards); });
  add_ckpt_quantize_command(*cmd);
}

}  // namespace tessera::cli
