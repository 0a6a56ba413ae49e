#include "cli/train_common.h"

#include <filesystem>
#include <ostream>

#include "cli/model_loading.h"

namespace tessera::cli {

namespace {

constexpr const char* kScalarsKey = "optimizer_scalars";

// Options that must not change when resuming, because they define the data order or the
// model; the rest (max_steps, logging, the layout, ...) may.
void check_resumable(const TrainOptions& now, const nlohmann::json& saved) {
  for (const char* key : {"train_data", "batch_size", "seq_len", "seed", "tokenizer"}) {
    TESSERA_CHECK(!saved.contains(key) || saved[key] == now.to_json()[key], "train: cannot resume ",
                  "with a different ", key, " (checkpoint: ", saved[key].dump(),
                  ", now: ", now.to_json()[key].dump(),
                  "); use another --run-dir or --resume never");
  }
}

}  // namespace

std::string metrics_path(const TrainOptions& o) {
  return o.run_dir + "/metrics.jsonl";
}

std::optional<ResumePoint> find_resume(const TrainOptions& o) {
  if (o.resume != "auto") return std::nullopt;
  std::optional<std::string> latest = nn::find_latest_checkpoint(o.run_dir);
  if (!latest) return std::nullopt;
  ResumePoint r{*latest, nn::load_checkpoint(*latest)};
  if (r.data.state.contains("options")) check_resumable(o, r.data.state["options"]);
  return r;
}

nn::GPTConfig resolve_config(const TrainOptions& o, const data::Tokenizer& tokenizer,
                             const ResumePoint* resume, nn::StateDict* imported) {
  nn::GPTConfig c;
  if (resume != nullptr) {
    TESSERA_CHECK(resume->data.state.contains("model_config"), "train: checkpoint of step ",
                  resume->data.step, " has no model_config in its state.json");
    c = nn::GPTConfig::from_json(resume->data.state["model_config"]);
  } else if (!o.init_from.empty()) {
    *imported = import_weights(o.init_from, &c);
  } else {
    c = o.model_config();
    if (!o.model_overrides.contains("vocab_size")) c.vocab_size = tokenizer.vocab_size();
    c.validate();
  }
  TESSERA_CHECK(tokenizer.vocab_size() <= c.vocab_size, "train: the tokenizer has ",
                tokenizer.vocab_size(), " ids but the model's vocab_size is ", c.vocab_size);
  TESSERA_CHECK(o.seq_len <= c.block_size, "train: --seq-len ", o.seq_len,
                " exceeds the model's block_size ", c.block_size);
  return c;
}

std::unique_ptr<data::DataLoader> make_loader(const TrainOptions& o, const std::string& pattern,
                                              int64_t vocab_size, bool shuffle) {
  data::LoaderOptions lo;
  lo.batch_size = o.batch_size;
  lo.seq_len = o.seq_len;
  lo.seed = o.seed;
  lo.vocab_size = vocab_size;
  lo.shuffle = shuffle;
  return std::make_unique<data::DataLoader>(pattern, lo);
}

std::string ModelSplit::describe() const {
  return str_cat("tp", tp, " x pp", pp, " (V ", virtual_stages, ")");
}

ModelSplit checkpoint_split(const nn::CheckpointData& checkpoint) {
  ModelSplit s;
  if (!checkpoint.state.contains("parallel")) return s;
  const nlohmann::json& p = checkpoint.state["parallel"];
  TESSERA_CHECK(p.is_object() && p.value("tp", nlohmann::json()).is_number_integer() &&
                    p.value("pp", nlohmann::json()).is_number_integer() &&
                    p.value("virtual_stages", nlohmann::json()).is_number_integer(),
                "train: checkpoint of step ", checkpoint.step,
                ": 'parallel' in state.json needs integers tp, pp and virtual_stages, got ",
                p.dump());
  s.tp = p["tp"].get<int64_t>();
  s.pp = p["pp"].get<int64_t>();
  s.virtual_stages = p["virtual_stages"].get<int64_t>();
  return s;
}

std::string optimizer_part_file(int pp_rank, int tp_rank) {
  return str_cat("optimizer_pp", pp_rank, "_tp", tp_rank, ".safetensors");
}

std::optional<nn::OptimizerState> load_optimizer_part(const ResumePoint& resume,
                                                      const ModelSplit& split, int pp_rank,
                                                      int tp_rank, std::string* why) {
  const ModelSplit saved = checkpoint_split(resume.data);
  if (!(saved == split)) {
    *why = str_cat("the checkpoint was written under ", saved.describe(), " and this run is ",
                   split.describe(), ", which divides the optimizer state differently");
    return std::nullopt;
  }
  if (!resume.data.state.contains("parallel"))
    return nn::OptimizerState{resume.data.optimizer, resume.data.state.at("optimizer")};
  const std::string path =
      (std::filesystem::path(resume.dir) / optimizer_part_file(pp_rank, tp_rank)).string();
  TESSERA_CHECK(std::filesystem::is_regular_file(path), "train: ", path,
                " is missing (the optimizer state of model part pp ", pp_rank, " tp ", tp_rank,
                "); resume with --resume never, or from an earlier checkpoint");
  nn::SafetensorsFile file = nn::read_safetensors(path);
  for (const auto& [key, value] : file.metadata) {
    if (key != kScalarsKey) continue;
    nlohmann::json scalars = nlohmann::json::parse(value, nullptr, false);
    TESSERA_CHECK(!scalars.is_discarded(), "train: ", path, ": its '", kScalarsKey,
                  "' metadata is not valid JSON");
    return nn::OptimizerState{std::move(file.tensors), std::move(scalars)};
  }
  detail::throw_error("train: ", path, " has no '", kScalarsKey, "' metadata");
}

void save_optimizer_part(const std::string& checkpoint_dir, int pp_rank, int tp_rank,
                         const nn::OptimizerState& state) {
  nn::write_safetensors(
      (std::filesystem::path(checkpoint_dir) / optimizer_part_file(pp_rank, tp_rank)).string(),
      state.tensors, {{kScalarsKey, state.scalars.dump()}});
}

void print_samples(nn::GPT& net, const nn::GPTConfig& config, const data::Tokenizer& tokenizer,
                   const TrainOptions& o, Device device, std::ostream& out) {
  std::vector<int32_t> prompt = tokenizer.encode(o.sample_prompt);
  TESSERA_CHECK(!prompt.empty(), "train: --sample-prompt encodes to no tokens");
  int64_t room = config.block_size - int64_t(prompt.size());
  int64_t n = std::min(o.sample_tokens, room);
  TESSERA_CHECK(n > 0, "train: the sample prompt fills the whole context");
  std::vector<int64_t> ids(prompt.begin(), prompt.end());
  for (int64_t i = 0; i < o.num_samples; ++i) {
    nn::GenerateOptions g;
    g.max_new_tokens = n;
    g.sampling.temperature = o.sample_temperature;
    g.sampling.top_k = o.sample_top_k;
    g.sampling.seed = o.seed + uint64_t(i);
    Tensor prompt_ids = from_vector<int64_t>(ids, {1, int64_t(ids.size())});
    Tensor result = ops::to(nn::generate(net, ops::to(prompt_ids, device), g), Device::cpu());
    std::vector<int64_t> all = to_vector<int64_t>(result);
    std::vector<int32_t> tokens(all.begin(), all.end());
    out << "--- sample " << i + 1 << " (" << n << " tokens, temperature " << o.sample_temperature
        << ", top-k " << o.sample_top_k << ") ---\n"
        << tokenizer.decode(tokens) << "\n";
  }
}

}  // namespace tessera::cli
