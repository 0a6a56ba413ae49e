#include "tessera/train/detail/model_source.h"

#include <filesystem>
#include <optional>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/json_depth.h"
#include "tessera/data/load_tokenizer.h"
#include "tessera/nn/io/checkpoint.h"
#include "tessera/nn/io/hf_gpt2.h"
#include "tessera/nn/io/hf_llama.h"
#include "tessera/nn/io/llmc.h"
#include "tessera/nn/io/sharded_checkpoint.h"
#include "tessera/parallel/comm/first_rank_error.h"
#include "tessera/parallel/tp/detail/full_state.h"

namespace tessera::train {

namespace fs = std::filesystem;

namespace {

// Whether the config.json in `dir` describes a Llama-style model.
bool llama_config_in(const fs::path& dir) {
  const fs::path cfg = dir / "config.json";
  if (!fs::is_regular_file(cfg)) return false;
  const std::string text = read_text_file(cfg.string());
  check_json_depth(text, cfg.string());
  try {
    return nn::is_hf_llama_config(nlohmann::json::parse(text));
  } catch (const nlohmann::json::exception& e) {
    detail::throw_error(cfg.string(), ": not valid JSON: ", e.what());
  }
}

// --n-head names the heads of GPT-2 weights that do not record them (safetensors without a
// config.json). Every other source records its own, where the flag was ignored.
void check_n_head_applies(ModelSourceKind kind, const std::string& spec, int64_t n_head) {
  TESSERA_CHECK(n_head >= 0, "model: --n-head must be >= 0 (0: from the weights), got ", n_head);
  const char* records = kind == ModelSourceKind::hf_llama ? "a Llama model, whose config.json"
                        : kind == ModelSourceKind::llmc   ? "an llm.c model, whose header"
                        : kind == ModelSourceKind::hf_gpt2
                            ? nullptr
                            : "a Tessera run or checkpoint, whose state.json";
  TESSERA_CHECK(n_head == 0 || records == nullptr, "model: ", spec, " is ", records,
                " gives its heads: --n-head applies to Hugging Face GPT-2 weights only");
}

}  // namespace

ModelSourceKind detect_model_source(const std::string& spec) {
  fs::path p(spec);
  TESSERA_CHECK(fs::exists(p), "model: ", spec, " does not exist");
  if (fs::is_directory(p)) {
    if (fs::exists(p / "checkpoints")) return ModelSourceKind::run_dir;
    if (fs::exists(p / "state.json") || nn::is_sharded_checkpoint(spec))
      return ModelSourceKind::checkpoint;
    const bool weights =
        fs::exists(p / "model.safetensors") || fs::exists(p / "model.safetensors.index.json");
    if (weights) return llama_config_in(p) ? ModelSourceKind::hf_llama : ModelSourceKind::hf_gpt2;
  } else {
    if (p.extension() == ".bin") return ModelSourceKind::llmc;
    if (p.extension() == ".safetensors")
      return llama_config_in(p.parent_path()) ? ModelSourceKind::hf_llama
                                              : ModelSourceKind::hf_gpt2;
  }
  detail::throw_error(
      "model: ", spec, " is neither a run directory (with checkpoints/), a ",
      "checkpoint directory (with state.json or manifest.json), Hugging Face GPT-2 or Llama ",
      "weights (model.safetensors or its folder) nor an llm.c model .bin");
}

ImportedWeights import_weights(const std::string& spec, nn::GPTConfig* config, int64_t n_head) {
  ModelSourceKind kind = detect_model_source(spec);
  check_n_head_applies(kind, spec, n_head);
  ImportedWeights out;
  if (kind == ModelSourceKind::llmc) {
    out.whole = nn::import_llmc_gpt2(spec, config);
  } else if (kind == ModelSourceKind::hf_llama) {
    out.source = nn::hf_llama_source(spec, config);
  } else {
    TESSERA_CHECK(kind == ModelSourceKind::hf_gpt2, "model: ", spec,
                  " is a Tessera run or checkpoint, not HF or llm.c weights");
    nn::HfGpt2Options options;
    options.n_head = n_head;
    out.whole = nn::import_hf_gpt2(spec, config, options);
  }
  return out;
}

namespace {

// The model of `config` for one process or one tensor-parallel rank, holding `weights` (full).
// Its weights are not drawn: the strict load fills every parameter.
std::unique_ptr<nn::GPT> build_model(const nn::GPTConfig& config, const nn::StateDict& weights,
                                     const std::shared_ptr<nn::TensorParallelOps>& tp) {
  if (!tp) {
    auto model =
        std::make_unique<nn::GPT>(config, DType::f32, nn::ModelParallel{}, nn::ParamInit::zeros);
    model->load_state_dict(weights, /*strict=*/true);
    return model;
  }
  nn::ModelParallel mp;
  mp.tp = tp;
  auto model = std::make_unique<nn::GPT>(config, DType::f32, mp, nn::ParamInit::zeros);
  parallel::tp::load_full_state_dict(*model, weights, tp->rank(), tp->size(), /*strict=*/true);
  return model;
}

// The model config in an unsharded checkpoint's state.json, or nullopt on anything unusual
// (load_checkpoint then reads the directory and names what is wrong).
std::optional<nn::GPTConfig> peek_model_config(const std::string& dir) {
  try {
    if (nn::is_sharded_checkpoint(dir)) return std::nullopt;
    const std::string path = (fs::path(dir) / "state.json").string();
    const std::string text = read_text_file(path);
    check_json_depth(text, path);
    return nn::GPTConfig::from_json(nlohmann::json::parse(text).at("state").at("model_config"));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Whether `dir` is a sharded set (false for anything unusual: load_checkpoint then names it).
bool is_sharded_dir(const std::string& dir) {
  try {
    return nn::is_sharded_checkpoint(dir);
  } catch (const std::exception&) {
    return false;
  }
}

// The model config, step, tokenizer and state of a checkpoint's state.json into `out`.
void describe_checkpoint(const nn::CheckpointData& data, LoadedModel& out) {
  TESSERA_CHECK(data.state.contains("model_config"), "model: ", out.path,
                " has no model_config in its state (not written by tessera train?)");
  out.config = nn::GPTConfig::from_json(data.state["model_config"]);
  out.step = data.step;
  if (data.state.contains("options") && data.state["options"].contains("tokenizer"))
    out.tokenizer = data.state["options"]["tokenizer"].get<std::string>();
  out.state = data.state;
}

}  // namespace

LoadedModel load_model(const std::string& spec, int64_t n_head,
                       std::shared_ptr<parallel::tp::TensorParallel> tp) {
  LoadedModel out;
  out.kind = detect_model_source(spec);
  out.path = spec;
  if (out.kind == ModelSourceKind::hf_gpt2 || out.kind == ModelSourceKind::hf_llama ||
      out.kind == ModelSourceKind::llmc) {
    const ImportedWeights weights = import_weights(spec, &out.config, n_head);  // checks n_head
    if (weights.source == nullptr) {
      out.model = build_model(out.config, weights.whole, tp);
      return out;
    }
    // Read from the files by range: a tensor-parallel rank reads only its slices, and one
    // process reads each tensor straight into the model's, cast from the files' dtype.
    nn::ModelParallel mp;
    mp.tp = tp;
    auto model = std::make_unique<nn::GPT>(out.config, DType::f32, mp, nn::ParamInit::zeros);
    parallel::tp::read_full_source(*model, weights.source, tp ? tp->rank() : 0,
                                   tp ? tp->size() : 1);
    out.model = std::move(model);
    return out;
  }
  check_n_head_applies(out.kind, spec, n_head);  // a run or checkpoint: refused unless 0
  if (out.kind == ModelSourceKind::run_dir) {
    std::optional<std::string> latest = nn::find_latest_checkpoint(spec);
    TESSERA_CHECK(latest.has_value(), "model: run directory ", spec, " has no checkpoint yet");
    out.path = *latest;
  }
  // Tensor parallelism: each rank reads only its slices into its own tensors, so no rank
  // holds the full model (at tp8 a rank's load holds 1/8 of it, not all of it beside its
  // slice). The files are checked first, each rank checksumming its share (an unsharded
  // checkpoint's model file falls to rank 0, a sharded set's shards are dealt out), and the
  // group agrees before anyone reads.
  if (tp) {
    std::optional<nn::ShardedSet> set;
    nn::CheckpointData data;
    const nn::ChecksumShare share{tp->rank(), tp->size()};
    parallel::run_agreeing(*tp->group(), [&] {
      if (is_sharded_dir(out.path)) {
        set = nn::open_sharded_checkpoint(out.path, share);
        data.step = set->step;
        data.state = set->state;
      } else {
        data = nn::load_checkpoint(out.path, nn::CheckpointParts::model_checked, nullptr, share);
      }
    });
    describe_checkpoint(data, out);
    nn::ModelParallel mp;
    mp.tp = tp;
    auto model = std::make_unique<nn::GPT>(out.config, DType::f32, mp, nn::ParamInit::zeros);
    if (set)
      parallel::tp::read_full_sharded_set(*model, *set, tp->rank(), tp->size());
    else
      parallel::tp::read_full_source(
          *model,
          std::make_shared<const nn::TensorSource>(
              nn::TensorSource::of_file(std::make_shared<const nn::SafetensorsReader>(
                  (fs::path(out.path) / nn::kCheckpointModelFile).string()))),
          tp->rank(), tp->size());
    out.model = std::move(model);
    return out;
  }
  // One process and an unsharded checkpoint: the weights are read straight into the model's
  // tensors, so the load holds one copy of them, not two.
  std::unique_ptr<nn::GPT> direct;
  nn::StateDict targets;
  if (const std::optional<nn::GPTConfig> config = peek_model_config(out.path)) {
    direct =
        std::make_unique<nn::GPT>(*config, DType::f32, nn::ModelParallel{}, nn::ParamInit::zeros);
    targets = direct->state_dict();
  }
  nn::CheckpointData data =
      nn::load_checkpoint(out.path, nn::CheckpointParts::model, direct ? &targets : nullptr);
  describe_checkpoint(data, out);
  if (direct) {
    TESSERA_CHECK(direct->config().to_json() == out.config.to_json(), "model: ", out.path,
                  "/state.json changed while it was read (its model config differs between two "
                  "reads)");
    direct->load_state_dict(data.model, /*strict=*/true);  // every tensor read in place
    out.model = std::move(direct);
  } else {
    out.model = build_model(out.config, data.model, nullptr);
  }
  return out;
}

std::unique_ptr<data::Tokenizer> model_tokenizer(const LoadedModel& m,
                                                 const std::string& override_spec,
                                                 const std::string& command) {
  if (!override_spec.empty()) return data::load_tokenizer(override_spec);
  if (m.state.is_object() && m.state.contains("tokenizer"))
    return data::load_tokenizer_record(m.state["tokenizer"], m.path + "/state.json");
  // Hugging Face weights with their tokenizer beside them (what `ckpt convert --to hf` writes,
  // or a tokenizer.json).
  if (m.kind == ModelSourceKind::hf_gpt2 || m.kind == ModelSourceKind::hf_llama) {
    const fs::path dir =
        fs::is_directory(m.path) ? fs::path(m.path) : fs::path(m.path).parent_path();
    const bool pair = (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")) ||
                      (fs::exists(dir / "encoder.json") && fs::exists(dir / "vocab.bpe"));
    if (pair || fs::exists(dir / "tokenizer.json")) return data::load_tokenizer(dir.string());
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
