#include "cli/trainer.h"

#include <chrono>
#include <filesystem>
#include <iomanip>
#include <ostream>

#include "cli/metrics.h"
#include "cli/parallel_training.h"
#include "cli/train_common.h"
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

double evaluate(Session& s, const TrainOptions& o) {
  NoGradGuard no_grad;
  s.net().eval();
  const double loss = validation_loss(*s.val, o, [&](const data::Batch& b) {
    return s.net().loss(ops::to(b.inputs, s.device), ops::to(b.targets, s.device)).item<float>();
  });
  s.net().train();
  return loss;
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

}  // namespace

Trainer::Trainer(TrainOptions options, std::ostream& out)
    : options_(std::move(options)), out_(out) {}

TrainResult Trainer::run() {
  const TrainOptions& o = options_;
  o.validate();
  if (o.parallel() || mpi_world_size() > 1) {
    TESSERA_CHECK(!o.stochastic_rounding, "train: --stochastic-rounding is for the single-process ",
                  "trainer; this run has ", mpi_world_size(), " processes");
    return run_parallel_training(o, out_, stop_requested_);
  }
  if (o.threads > 0) set_num_threads(o.threads);
  const Device device = open_train_device(o.device);
  fs::create_directories(o.run_dir);

  std::optional<ResumePoint> resume = find_resume(o);

  Session s;
  s.tokenizer = data::load_tokenizer(o.tokenizer);
  nn::StateDict imported;
  s.config = resolve_config(o, *s.tokenizer, resume ? &*resume : nullptr, &imported);
  s.model = std::make_unique<nn::GPT>(s.config);
  if (!imported.empty()) s.model->load_state_dict(imported);
  const nn::Precision precision = o.precision_policy();
  if (precision != nn::Precision::fp32)
    s.compute = std::make_unique<nn::GPT>(s.config, nn::compute_dtype(precision));
  s.device = device;
  nn::move_to_device(s.model->state_dict(), device);
  if (s.compute) nn::move_to_device(s.compute->state_dict(), device);
  s.net().set_dropout_seed(o.seed);
  s.net().train();
  s.optimizer = make_optimizer(o, *s.model);
  s.schedule = o.lr_schedule();

  s.train = make_loader(o, o.train_data, s.config.vocab_size, true);
  if (!o.val_data.empty()) s.val = make_loader(o, o.val_data, s.config.vocab_size, false);

  TrainResult result;
  if (resume) s.model->load_state_dict(resume->data.model);
  // Rounds the master weights (fresh, imported or resumed) into the compute model.
  s.precision = std::make_unique<nn::MixedPrecision>(precision, s.model->named_parameters(),
                                                     s.net().named_parameters(), o.loss_scaler());
  if (o.stochastic_rounding) s.precision->set_stochastic_rounding(o.seed);
  std::string optimizer_note;
  if (resume) {
    // Whichever layout wrote the checkpoint, its optimizer state is this format.
    optimizer_note = restore_optimizer(
        *resume, [&](const nn::OptimizerState& opt) { s.optimizer->load_state_dict(opt); });
    const nlohmann::json& state = resume->data.state;
    s.train->restore(data::LoaderState::from_json(state.at("loader")));
    s.step = resume->data.step;
    if (state.contains("precision")) s.precision->load_state(state["precision"]);
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
  if (!optimizer_note.empty())
    out_ << "optimizer state not restored (it starts from zero): " << optimizer_note << "\n";
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
  if (!result.interrupted && o.sample_tokens > 0)
    print_samples(s.net(), s.config, *s.tokenizer, o, device, out_);
  return result;
}

}  // namespace tessera::cli
