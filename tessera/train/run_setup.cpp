#include "tessera/train/run_setup.h"

#include <algorithm>
#include <filesystem>
#include <ostream>

#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/nn/generate.h"
#include "tessera/parallel/comm/first_rank_error.h"
#include "tessera/train/detail/engine_config.h"
#include "tessera/train/detail/model_source.h"

namespace tessera::train {

namespace {

// Options that must not change when resuming, because they define the data order or the
// model; the rest (max_steps, logging, the layout, ...) may.
void check_resumable(const TrainOptions& now, const nlohmann::json& saved) {
  for (const char* key : kDataOrderOptions) {
    TESSERA_CHECK(!saved.contains(key) || saved[key] == now.to_json()[key], "train: cannot resume ",
                  "with a different ", key, " (checkpoint: ", saved[key].dump(),
                  ", now: ", now.to_json()[key].dump(),
                  "); use another --run-dir or --resume never");
  }
  // The checkpoint's weights replace those of --init-from; given, it must be the run's own.
  const std::string started = saved.value("init_from", std::string());
  auto same_place = [](const std::string& a, const std::string& b) {
    std::error_code ea, eb;  // another spelling of the same path is the same weights
    return a == b ||
           (!b.empty() &&
            std::filesystem::weakly_canonical(a, ea) == std::filesystem::weakly_canonical(b, eb) &&
            !ea && !eb);
  };
  TESSERA_CHECK(now.init_from.empty() || same_place(now.init_from, started), "train: --init-from ",
                now.init_from, " does not apply: the checkpoint resumed continues a run that ",
                started.empty() ? std::string("started from scratch") : "started from " + started,
                "; use another --run-dir or --resume never");
}

// Each of `keys` must say in `wanted` what it says in `has`, the config that `source` gives;
// dropout is exempt, since neither weights nor a checkpoint fix it. A model flag that
// contradicts the weights a run starts from would otherwise be dropped without a word.
void check_model_agrees(const nlohmann::json& wanted, const nlohmann::json& has,
                        const std::vector<std::string>& keys, const std::string& flag,
                        const std::string& source) {
  auto field = [](const nlohmann::json& j, const std::string& key) {
    return j.contains(key) ? j.at(key) : nlohmann::json();  // "quantization" only when set
  };
  std::string gives, holds;  // every key that differs, so one run of the command shows them all
  for (const std::string& key : keys) {
    if (key == "dropout" || field(wanted, key) == field(has, key)) continue;
    const char* comma = gives.empty() ? "" : ", ";
    gives += str_cat(comma, key, " ", field(wanted, key).dump());
    holds += str_cat(comma, key, " ", field(has, key).dump());
  }
  TESSERA_CHECK(gives.empty(), "train: ", flag, " gives ", gives, "; ", source, " has ", holds,
                " (only dropout may differ)");
}

std::vector<std::string> keys_of(const nlohmann::json& j) {
  std::vector<std::string> keys;
  for (const auto& item : j.items()) keys.push_back(item.key());
  return keys;
}

// --init-from: the weights give the model. Of the overrides only dropout applies (weights do
// not record it); any other key must say what the weights say, and a preset is refused. Before,
// both were dropped without a word: --init-from gpt2 --model '{"n_layer": 6}' trained 12.
nn::GPTConfig imported_with_overrides(const TrainOptions& o, const nn::GPTConfig& imported) {
  TESSERA_CHECK(o.preset == TrainOptions().preset, "train: --preset ", o.preset,
                " does not apply with --init-from ", o.init_from, ", whose weights give the model");
  const nn::GPTConfig c = nn::GPTConfig::from_json(o.model_overrides, imported);
  check_model_agrees(c.to_json(), imported.to_json(), keys_of(o.model_overrides), "--model",
                     "--init-from " + o.init_from);
  return c;
}

// Resuming: the checkpoint gives the model. A --preset given (not the default) must describe
// it whole, vocab_size from the tokenizer as a fresh run takes it, and each --model key must
// agree; dropout alone may change. Before, both were dropped without a word: resuming a
// 2-layer run with --model '{"n_layer": 3}' trained 2 layers.
nn::GPTConfig resumed_with_overrides(const TrainOptions& o, const data::Tokenizer& tokenizer,
                                     const ResumePoint& resume) {
  nn::GPTConfig c = nn::GPTConfig::from_json(resume.data.state["model_config"]);
  const nlohmann::json saved = c.to_json();  // every field, an older checkpoint's too
  const std::string source =
      str_cat("the checkpoint of step ", resume.data.step, " (", resume.dir, ") it resumes from");
  if (o.preset != TrainOptions().preset) {
    nn::GPTConfig wanted = o.model_config();
    if (!o.model_overrides.contains("vocab_size")) wanted.vocab_size = tokenizer.vocab_size();
    check_model_agrees(wanted.to_json(), saved, keys_of(wanted.to_json()),
                       "--preset " + o.preset + (o.model_overrides.empty() ? "" : " with --model"),
                       source);
  } else {
    check_model_agrees(nn::GPTConfig::from_json(o.model_overrides, c).to_json(), saved,
                       keys_of(o.model_overrides), "--model", source);
  }
  if (o.model_overrides.contains("dropout"))
    c = nn::GPTConfig::from_json({{"dropout", o.model_overrides["dropout"]}}, c);
  return c;
}

}  // namespace

std::string precision_banner(const TrainOptions& o) {
  switch (o.precision_policy()) {
    case nn::Precision::bf16:
      return "bf16 (bf16 weights and activations; fp32 master weights, optimizer state and loss)";
    case nn::Precision::fp16:
      return str_cat("fp16 (fp16 weights and activations; fp32 master weights, optimizer state ",
                     "and loss; dynamic loss scale from ", o.loss_scale_init, ", doubling after ",
                     o.loss_scale_window, " clean steps)");
    default:
      return "fp32";
  }
}

std::string metrics_path(const TrainOptions& o) {
  return o.run_dir + "/metrics.jsonl";
}

std::string flight_dir(const TrainOptions& o) { return o.run_dir + "/flight"; }

std::string checkpoint_log_path(const TrainOptions& o) {
  return o.run_dir + "/checkpoints.jsonl";
}

nn::LoadedCheckpoint open_checkpoint_together(parallel::Communicator& world, const std::string& dir,
                                              bool open_gathered) {
  nn::LoadedCheckpoint opened;
  parallel::run_agreeing(world, [&] {
    opened = nn::open_checkpoint(dir, open_gathered, {world.rank(), world.size()});
  });
  return opened;
}

std::optional<ResumePoint> find_resume(const TrainOptions& o, parallel::Communicator& world) {
  if (o.resume == "never") return std::nullopt;
  // Under a layout a single-process checkpoint is opened, not read: each rank reads its part.
  const bool layout = uses_layout_engine(o);
  ResumePoint r;
  std::optional<nn::LoadedCheckpoint> opened;
  if (o.resume == "auto") {
    opened = nn::newest_good_checkpoint(o.run_dir, &r.skipped, [&](const std::string& dir) {
      return open_checkpoint_together(world, dir, layout);
    });
    if (!opened) return std::nullopt;
  } else {
    opened = open_checkpoint_together(world, o.resume, layout);
  }
  r.dir = std::move(opened->dir);
  r.data = std::move(opened->data);
  r.set = std::move(opened->set);
  r.model_files = std::move(opened->model_files);
  r.optimizer_files = std::move(opened->optimizer_files);
  if (r.data.state.contains("options")) check_resumable(o, r.data.state["options"]);
  return r;
}

std::string describe_skipped(const ResumePoint& resume) {
  std::string lines;
  for (const nn::SkippedCheckpoint& s : resume.skipped)
    lines += str_cat("skipping checkpoint ", s.dir, ": ", s.reason, "\n");
  return lines;
}

nn::GPTConfig resolve_config(const TrainOptions& o, const data::Tokenizer& tokenizer,
                             const ResumePoint* resume, ImportedWeights* imported) {
  nn::GPTConfig c;
  if (resume != nullptr) {
    TESSERA_CHECK(resume->data.state.contains("model_config"), "train: checkpoint of step ",
                  resume->data.step, " has no model_config in its state.json");
    c = resumed_with_overrides(o, tokenizer, *resume);
  } else if (!o.init_from.empty()) {
    nn::GPTConfig weights;
    *imported = import_weights(o.init_from, &weights);
    c = imported_with_overrides(o, weights);
  } else {
    c = o.model_config();
    if (!o.model_overrides.contains("vocab_size")) c.vocab_size = tokenizer.vocab_size();
    c.validate();
  }
  TESSERA_CHECK(tokenizer.vocab_size() <= c.vocab_size, "train: the tokenizer has ",
                tokenizer.vocab_size(), " ids but the model's vocab_size is ", c.vocab_size);
  TESSERA_CHECK(o.seq_len <= c.block_size, "train: --seq-len ", o.seq_len,
                " exceeds the model's block_size ", c.block_size);
  TESSERA_CHECK(c.quantization.empty(), "train: the model's weights are quantized (",
                c.quantization, "), which is for inference; train the full-precision model");
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

double validation_loss(data::DataLoader& val, const TrainOptions& o,
                       const std::function<double(const data::Batch&)>& loss) {
  val.reset();
  const int64_t n = std::min<int64_t>(o.eval_batches, val.batches_per_epoch());
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += loss(val.next());
  return total / double(std::max<int64_t>(n, 1));
}

std::string restore_optimizer(const ResumePoint& resume,
                              const std::function<void(const nn::OptimizerState&)>& load) {
  const nlohmann::json& state = resume.data.state;
  if (!state.contains("optimizer") || resume.data.optimizer.empty())
    return "the checkpoint holds no optimizer state";
  try {
    load(nn::OptimizerState{resume.data.optimizer, state["optimizer"]});
  } catch (const Error& e) {
    detail::throw_error(
        "train: ", (std::filesystem::path(resume.dir) / nn::kCheckpointOptimizerFile).string(),
        " (with state.json's \"optimizer\"): ", e.what());
  }
  return "";
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

}  // namespace tessera::train
