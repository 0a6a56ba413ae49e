#include "tessera/train/detail/model_source.h"

#include <filesystem>

#include "tessera/core/error.h"
#include "tessera/data/load_tokenizer.h"
#include "tessera/nn/io/checkpoint.h"
#include "tessera/nn/io/hf_gpt2.h"
#include "tessera/nn/io/llmc.h"
#include "tessera/nn/io/sharded_checkpoint.h"
#include "tessera/parallel/tp/detail/full_state.h"

namespace tessera::train {

namespace fs = std::filesystem;

ModelSourceKind detect_model_source(const std::string& spec) {
  fs::path p(spec);
  TESSERA_CHECK(fs::exists(p), "model: ", spec, " does not exist");
  if (fs::is_directory(p)) {
    if (fs::exists(p / "checkpoints")) return ModelSourceKind::run_dir;
    if (fs::exists(p / "state.json") || nn::is_sharded_checkpoint(spec))
      return ModelSourceKind::checkpoint;
    if (fs::exists(p / "model.safetensors")) return ModelSourceKind::hf_gpt2;
  } else {
    if (p.extension() == ".bin") return ModelSourceKind::llmc;
    if (p.extension() == ".safetensors") return ModelSourceKind::hf_gpt2;
  }
  detail::throw_error(
      "model: ", spec, " is neither a run directory (with checkpoints/), a ",
      "checkpoint directory (with state.json or manifest.json), Hugging Face GPT-2 ", "weights ",
      "(model.safetensors or its folder) nor an llm.c model .bin");
}

nn::StateDict import_weights(const std::string& spec, nn::GPTConfig* config, int64_t n_head) {
  ModelSourceKind kind = detect_model_source(spec);
  if (kind == ModelSourceKind::llmc) return nn::import_llmc_gpt2(spec, config);
  TESSERA_CHECK(kind == ModelSourceKind::hf_gpt2, "model: ", spec,
                " is a Tessera run or checkpoint, not HF or llm.c weights");
  nn::HfGpt2Options options;
  options.n_head = n_head;
  return nn::import_hf_gpt2(spec, config, options);
}

namespace {

// The model of `config` for one process or one tensor-parallel rank, holding `weights` (full).
std::unique_ptr<nn::GPT> build_model(const nn::GPTConfig& config, const nn::StateDict& weights,
                                     const std::shared_ptr<nn::TensorParallelOps>& tp) {
  if (!tp) {
    auto model = std::make_unique<nn::GPT>(config);
    model->load_state_dict(weights);
    return model;
  }
  nn::ModelParallel mp;
  mp.tp = tp;
  auto model = std::make_unique<nn::GPT>(config, DType::f32, mp);
  parallel::tp::load_full_state_dict(*model, weights, tp->rank(), tp->size());
  return model;
}

}  // namespace

LoadedModel load_model(const std::string& spec, int64_t n_head,
                       std::shared_ptr<nn::TensorParallelOps> tp) {
  LoadedModel out;
  out.kind = detect_model_source(spec);
  out.path = spec;
  if (out.kind == ModelSourceKind::hf_gpt2 || out.kind == ModelSourceKind::llmc) {
    nn::StateDict weights = import_weights(spec, &out.config, n_head);
    out.model = build_model(out.config, weights, tp);
    return out;
  }
  if (out.kind == ModelSourceKind::run_dir) {
    std::optional<std::string> latest = nn::find_latest_checkpoint(spec);
    TESSERA_CHECK(latest.has_value(), "model: run directory ", spec, " has no checkpoint yet");
    out.path = *latest;
  }
  nn::CheckpointData data = nn::load_checkpoint(out.path);
  TESSERA_CHECK(data.state.contains("model_config"), "model: ", out.path,
                " has no model_config in its state (not written by tessera train?)");
  out.config = nn::GPTConfig::from_json(data.state["model_config"]);
  out.step = data.step;
  if (data.state.contains("options") && data.state["options"].contains("tokenizer"))
    out.tokenizer = data.state["options"]["tokenizer"].get<std::string>();
  out.state = data.state;
  out.model = build_model(out.config, data.model, tp);
  return out;
}

std::unique_ptr<data::Tokenizer> model_tokenizer(const LoadedModel& m,
                                                 const std::string& override_spec,
                                                 const std::string& command) {
  if (!override_spec.empty()) return data::load_tokenizer(override_spec);
  if (m.state.is_object() && m.state.contains("tokenizer"))
    return data::load_tokenizer_record(m.state["tokenizer"], m.path + "/state.json");
  // Hugging Face weights with their tokenizer beside them (what `ckpt convert --to hf` writes).
  if (m.kind == ModelSourceKind::hf_gpt2) {
    const fs::path dir = fs::is_directory(m.path) ? fs::path(m.path) : fs::path(m.path).parent_path();
    for (const char* vocab : {"vocab.json", "encoder.json"})
      if (fs::exists(dir / vocab) && (fs::exists(dir / "merges.txt") || fs::exists(dir / "vocab.bpe")))
        return data::load_tokenizer(dir.string());
  }
  TESSERA_CHECK(!m.tokenizer.empty(), command, ": --tokenizer is required for ", m.path,
                " (it does not record one); for GPT-2 weights pass a folder with encoder.json and "
                "vocab.bpe");
  std::error_code ec;
  TESSERA_CHECK(m.tokenizer == "byte" || std::filesystem::exists(m.tokenizer, ec), command, ": ",
                m.path, " was trained with the tokenizer '", m.tokenizer,
                "', which does not exist from here (the checkpoint predates checkpoints that carry "
                "their tokenizer); pass --tokenizer");
  return data::load_tokenizer(m.tokenizer);
}

}  // namespace tessera::train
