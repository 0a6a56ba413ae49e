#include "cli/trainer.h"

#include <chrono>
#include <filesystem>
#include <iomanip>
#include <ostream>

#include "cli/metrics.h"
#include "cli/model_loading.h"
#include "cli/train_device.h"
#include "tessera/core/file_io.h"
#include "tessera/tessera.h"

namespace tessera::cli {

std::atomic<bool> Trainer::stop_requested_{false};

namespace {

namespace fs = std::filesystem;

// Everything one run trains with.
struct Session {
  nn::GPTConfig config;
  // The fp32 model: the master weights the optimizer updates and checkpoints hold. Under bf16
  // or fp16, `compute` is the same model in that dtype, which the forward pass runs.
  std::unique_ptr<nn::GPT> model, compute;
  std::unique_ptr<nn::MixedPrecision> precision;
  std::unique_ptr<nn::Optimizer> optimizer;
  std::unique_ptr<data::DataLoader> train, val;
  std::unique_ptr<data::Tokenizer> tokenizer;
  nn::LRSchedule schedule;
  int64_t step = 0;  // optimizer steps taken (fp16 overflow skips included)
  Device device = Device::cpu();

  nn::GPT& net() { return compute ? *compute : *model; }
};

std::string metrics_path(const TrainOptions& o) {
  return o.run_dir + "/metrics.jsonl";
}

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

std::unique_ptr<nn::Optimizer> make_optimizer(const TrainOptions& o, const nn::GPT& model) {
  if (o.optimizer == "sgd") {
    nn::SGDOptions s;
    s.lr = o.lr;
    s.momentum = o.momentum;
    s.weight_decay = o.weight_decay;
    return std::make_unique<nn::SGD>(model.named_parameters(), s);
  }
  nn::AdamWOptions a;
  a.lr = o.lr;
  a.beta1 = o.beta1;
  a.beta2 = o.beta2;
  a.eps = o.eps;
  a.weight_decay = o.weight_decay;
  return std::make_unique<nn::AdamW>(model.named_parameters(), a);
}

// The model config: a resumed run's comes from its checkpoint (and must match this run's
// options); otherwise from imported weights, or the preset with overrides, whose vocabulary
// defaults to the tokenizer's.
nn::GPTConfig resolve_config(const TrainOptions& o, const data::Tokenizer& tokenizer,
                             const nn::CheckpointData* resume, nn::StateDict* imported) {
  if (resume != nullptr) {
    TESSERA_CHECK(resume->state.contains("model_config"), "train: checkpoint of step ",
                  resume->step, " has no model_config in its state.json");
    return nn::GPTConfig::from_json(resume->state["model_config"]);
  }
  if (!o.init_from.empty()) {
    nn::GPTConfig c;
    *imported = import_weights(o.init_from, &c);
    return c;
  }
  nn::GPTConfig c = o.model_config();
  if (!o.model_overrides.contains("vocab_size")) c.vocab_size = tokenizer.vocab_size();
  c.validate();
  return c;
}

// Options that must not change when resuming, because they define the data order or the
// model; the rest (max_steps, logging, ...) may.
void check_resumable(const TrainOptions& now, const nlohmann::json& saved) {
  for (const char* key : {"train_data", "batch_size", "seq_len", "seed", "tokenizer"}) {
    TESSERA_CHECK(!saved.contains(key) || saved[key] == now.to_json()[key], "train: cannot resume ",
                  "with a different ", key, " (checkpoint: ", saved[key].dump(),
                  ", now: ", now.to_json()[key].dump(),
                  "); use another --run-dir or --resume never");
  }
}

double evaluate(Session& s, const TrainOptions& o) {
  NoGradGuard no_grad;
  s.net().eval();
  s.val->reset();
  int64_t n = std::min<int64_t>(o.eval_batches, s.val->batches_per_epoch());
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    data::Batch b = s.val->next();
    total += s.net().loss(ops::to(b.inputs, s.device), ops::to(b.targets, s.device)).item<float>();
  }
  s.net().train();
  return total / double(std::max<int64_t>(n, 1));
}

std::string save(Session& s, const TrainOptions& o) {
  nn::CheckpointData data;
  data.step = s.step;
  data.model = s.model->state_dict();
  nn::OptimizerState opt = s.optimizer->state_dict();
  data.optimizer = opt.tensors;
  data.state = {{"options", o.to_json()},
                {"model_config", s.config.to_json()},
                {"optimizer", opt.scalars},
                {"loader", s.train->state().to_json()},
                {"precision", s.precision->state()}};
  return nn::save_checkpoint(o.run_dir, data, o.keep_checkpoints);
}

void print_samples(Session& s, const TrainOptions& o, std::ostream& out) {
  std::vector<int32_t> prompt = s.tokenizer->encode(o.sample_prompt);
  TESSERA_CHECK(!prompt.empty(), "train: --sample-prompt encodes to no tokens");
  int64_t room = s.config.block_size - int64_t(prompt.size());
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
    Tensor result = ops::to(nn::generate(s.net(), ops::to(prompt_ids, s.device), g), Device::cpu());
    std::vector<int64_t> all = to_vector<int64_t>(result);
    std::vector<int32_t> tokens(all.begin(), all.end());
    out << "--- sample " << i + 1 << " (" << n << " tokens, temperature " << o.sample_temperature
        << ", top-k " << o.sample_top_k << ") ---\n"
        << s.tokenizer->decode(tokens) << "\n";
  }
}

}  // namespace

Trainer::Trainer(TrainOptions options, std::ostream& out)
    : options_(std::move(options)), out_(out) {}

TrainResult Trainer::run() {
  const TrainOptions& o = options_;
  o.validate();
  if (o.threads > 0) set_num_threads(o.threads);
  const Device device = open_train_device(o.device);
  fs::create_directories(o.run_dir);

  std::optional<nn::CheckpointData> resume;
  if (o.resume == "auto") {
    if (std::optional<std::string> latest = nn::find_latest_checkpoint(o.run_dir)) {
      resume = nn::load_checkpoint(*latest);
      if (resume->state.contains("options")) check_resumable(o, resume->state["options"]);
    }
  }

  Session s;
  s.tokenizer = data::load_tokenizer(o.tokenizer);
  nn::StateDict imported;
  s.config = resolve_config(o, *s.tokenizer, resume ? &*resume : nullptr, &imported);
  TESSERA_CHECK(s.tokenizer->vocab_size() <= s.config.vocab_size, "train: the tokenizer has ",
                s.tokenizer->vocab_size(), " ids but the model's vocab_size is ",
                s.config.vocab_size);
  TESSERA_CHECK(o.seq_len <= s.config.block_size, "train: --seq-len ", o.seq_len,
                " exceeds the model's block_size ", s.config.block_size);
  s.model = std::make_unique<nn::GPT>(s.config);
  if (!imported.empty()) s.model->load_state_dict(imported);
  const nn::Precision precision = o.precision_policy();
  if (precision != nn::Precision::fp32)
    s.compute = std::make_unique<nn::GPT>(s.config, nn::compute_dtype(precision));
  s.device = device;
  move_tensors_in_place(s.model->state_dict(), device);
  if (s.compute) move_tensors_in_place(s.compute->state_dict(), device);
  s.net().set_dropout_seed(o.seed);
  s.net().train();
  s.optimizer = make_optimizer(o, *s.model);
  s.schedule = o.lr_schedule();

  data::LoaderOptions lo;
  lo.batch_size = o.batch_size;
  lo.seq_len = o.seq_len;
  lo.seed = o.seed;
  lo.vocab_size = s.config.vocab_size;
  s.train = std::make_unique<data::DataLoader>(o.train_data, lo);
  if (!o.val_data.empty()) {
    lo.shuffle = false;
    s.val = std::make_unique<data::DataLoader>(o.val_data, lo);
  }

  TrainResult result;
  if (resume) s.model->load_state_dict(resume->model);
  // Rounds the master weights (fresh, imported or resumed) into the compute model.
  s.precision = std::make_unique<nn::MixedPrecision>(precision, s.model->named_parameters(),
                                                     s.net().named_parameters(), o.loss_scaler());
  if (resume) {
    s.optimizer->load_state_dict({resume->optimizer, resume->state.at("optimizer")});
    s.train->restore(data::LoaderState::from_json(resume->state.at("loader")));
    s.step = resume->step;
    if (resume->state.contains("precision")) s.precision->load_state(resume->state["precision"]);
    MetricsLog::truncate_after(metrics_path(o), s.step);
    result.checkpoint = nn::checkpoint_name(s.step);
  }
  result.start_step = s.step;
  write_file_atomic(o.run_dir + "/config.json", o.to_json().dump(2) + "\n");

  const int threads = num_threads();
  std::string peak_text;
  double peak = 0;
  if (o.peak_gflops > 0) {
    peak = o.peak_gflops;
    peak_text = str_cat(o.peak_gflops, " GFLOP/s (--peak-gflops)");
  } else if (device.is_cuda()) {
    // No table of GPU peaks here: the user states the one for the GPU and the precision.
    peak_text = "none stated: pass --peak-gflops (the GPU's dense peak) for MFU on cuda";
  } else {
    peak = cpu_peak_gflops(threads, &peak_text);
  }
  const double fpt = flops_per_token(s.config, o.seq_len);
  const int64_t tokens_per_step = o.batch_size * o.seq_len * o.grad_accum;

  out_ << "tessera train: resolved options\n"
       << o.to_json().dump(2) << "\n"
       << "model: " << s.config.to_json().dump() << "\n"
       << "parameters: " << s.model->num_parameters() << " | tokens/step: " << tokens_per_step
       << " | FLOPs/token: " << std::setprecision(4) << fpt / 1e6 << " M | threads: " << threads
       << "\nMFU is against a peak of " << peak_text << "\n"
       << "device: " << device << " | precision: " << precision_banner(o) << "\n";
  if (resume) out_ << "resuming from " << o.run_dir << "/checkpoints/" << result.checkpoint << "\n";
  out_ << std::flush;

  MetricsLog log(metrics_path(o));
  Allocator& alloc = allocator_for(device);
  double last_loss = 0;
  while (s.step < o.max_steps) {
    auto t0 = std::chrono::steady_clock::now();
    s.net().set_step(s.step);
    double lr = s.schedule.lr(s.step);
    s.optimizer->set_lr(lr);
    double loss_sum = 0;
    for (int64_t micro = 0; micro < o.grad_accum; ++micro) {
      data::Batch b = s.train->next();
      Tensor loss = s.net().loss(ops::to(b.inputs, device), ops::to(b.targets, device));
      loss_sum += loss.item<float>();
      if (o.grad_accum > 1) loss = mul(loss, 1.0 / double(o.grad_accum));
      s.precision->scale_loss(loss).backward();
      s.precision->accumulate_grads();
    }
    const nn::PrecisionStep ps = s.precision->step(*s.optimizer, o.grad_clip);
    s.optimizer->zero_grad();
    ++s.step;
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    StepMetrics m;
    m.step = s.step;
    m.loss = last_loss = loss_sum / double(o.grad_accum);
    m.lr = lr;
    m.grad_norm = ps.grad_norm;
    m.precision = o.precision;
    if (const nn::DynamicLossScaler* scaler = s.precision->scaler()) {
      m.loss_scale = ps.loss_scale;
      m.skipped = ps.skipped;
      m.skipped_steps = scaler->skipped_steps();
    }
    m.ms = seconds * 1e3;
    m.tokens_per_s = double(tokens_per_step) / seconds;
    m.mfu = peak > 0 ? fpt * m.tokens_per_s / (peak * 1e9) : 0.0;
    AllocatorStats st = alloc.stats();
    m.live_bytes = st.live_bytes;
    m.peak_bytes = st.peak_bytes;
    m.rss_bytes = process_rss_bytes();
    bool last = s.step == o.max_steps;
    if (s.val && ((o.eval_every > 0 && s.step % o.eval_every == 0) || last)) {
      m.val_loss = evaluate(s, o);
      result.final_val_loss = m.val_loss;
    }
    log.append(m.to_json());
    if (s.step % o.log_every == 0 || last || m.val_loss)
      out_ << m.console_line(o.max_steps) << "\n" << std::flush;

    bool stopping = stop_requested_.load();
    if ((o.checkpoint_every > 0 && s.step % o.checkpoint_every == 0) || last || stopping)
      result.checkpoint = save(s, o);
    if (stopping && !last) {
      result.interrupted = true;
      out_ << "interrupted after step " << s.step << ": checkpoint saved to " << result.checkpoint
           << "; run the same command to resume\n";
      break;
    }
  }
  result.final_step = s.step;
  result.final_loss = last_loss;
  if (!result.interrupted && o.sample_tokens > 0) print_samples(s, o, out_);
  return result;
}

}  // namespace tessera::cli
