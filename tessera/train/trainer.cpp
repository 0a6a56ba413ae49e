#include "tessera/train/trainer.h"

#include <chrono>
#include <filesystem>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <thread>

#include "tessera/core/allocator.h"
#include "tessera/core/file_io.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/threads.h"
#include "tessera/data/load_tokenizer.h"
#include "tessera/nn/io/checkpoint.h"
#include "tessera/parallel/comm/flight_watch.h"
#include "tessera/train/detail/device.h"
#include "tessera/train/detail/engine_config.h"
#include "tessera/train/detail/layout_engine.h"
#include "tessera/train/detail/model_source.h"
#include "tessera/train/detail/snapshot_staging.h"  // ~Trainer destroys the staging
#include "tessera/train/run_lock.h"                 // ~Trainer releases the lock
#include "tessera/train/tensorboard.h"
#include "tessera/train/world.h"

namespace tessera::train {

namespace {

// A terminal's carriage return and erase-line: the live progress line is redrawn in place.
constexpr const char* kClearLine = "\r\x1b[2K";

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

namespace fs = std::filesystem;

}  // namespace

Trainer::Trainer(TrainOptions options, std::shared_ptr<parallel::Communicator> world)
    : options_(std::move(options)), world_(std::move(world)) {
  const TrainOptions& o = options_;
  init_common();
  std::optional<ResumePoint> resume = find_resume(o, *world_);
  ImportedWeights imported;
  config_ = resolve_config(o, *tokenizer_, resume ? &*resume : nullptr, &imported);
  // Weights that a strict load replaces below are not drawn: a GPT-2 124M bf16 resume built in
  // 9.5 s with the draws and 2.3 s without on a 2-core machine (docs/benchmarks.md), time that
  // every restart's recovery pays.
  const nn::ParamInit init =
      resume || !imported.empty() ? nn::ParamInit::zeros : nn::ParamInit::drawn;
  if (uses_layout_engine(o)) {
    parallel::ParallelConfig pc = parallel_config(o, config_, world_->size(), device_);
    pc.init = init;
    engine_ = std::make_unique<LayoutEngine>(world_, config_, pc, o.seed);
  } else {
    check_module_layout(o, world_->size(),
                        o.optimizer == "sgd" ? "--optimizer sgd" : "--stochastic-rounding");
    // The fp32 master and, under bf16/fp16, the compute copy, both on the device.
    auto master = std::make_shared<nn::GPT>(config_, DType::f32, nn::ModelParallel{}, init);
    std::shared_ptr<nn::GPT> compute;  // rounded from the master by the engine, never drawn
    if (o.precision_policy() != nn::Precision::fp32)
      compute = std::make_shared<nn::GPT>(config_, nn::compute_dtype(o.precision_policy()),
                                          nn::ModelParallel{}, nn::ParamInit::zeros);
    nn::move_to_device(master->state_dict(), device_);
    if (compute) nn::move_to_device(compute->state_dict(), device_);
    (compute ? *compute : *master).set_dropout_seed(o.seed);
    (compute ? *compute : *master).set_recompute(o.recompute_policy());
    ModuleParts parts;
    parts.master = master;
    parts.compute = compute;
    parts.optimizer = make_optimizer(o, *master);
    parts.loss = [](nn::Module& net, const Tensor& x, const Tensor& y, int64_t step) {
      auto& gpt = dynamic_cast<nn::GPT&>(net);
      gpt.set_step(step);
      return gpt.loss(x, y);
    };
    engine_ = std::make_unique<ModuleEngine>(world_, std::move(parts), module_config(o, device_));
  }
  if (imported.source != nullptr)
    engine_->load_model_source(imported.source);
  else if (!imported.whole.empty())
    engine_->load_model(imported.whole);
  build_loaders();
  if (resume_from_local(resume ? resume->data.step : -1)) {
  } else if (resume) {
    resume_from(*resume);
  } else if (world_->rank() == 0) {
    // A fresh start at step 0: drop the lines of an attempt that died before its first
    // checkpoint was on disk, which the steps about to run would log again.
    MetricsLog::truncate_after(metrics_path(o), 0);
    MetricsLog::truncate_after(checkpoint_log_path(o), 0);
  }
  if (world_->rank() == 0)
    write_file_atomic(o.run_dir + "/config.json", o.to_config_file().dump(2) + "\n");
}

Trainer::Trainer(ModuleParts parts, TrainOptions options,
                 std::shared_ptr<parallel::Communicator> world)
    : options_(std::move(options)), world_(std::move(world)) {
  custom_model_ = true;
  init_common();
  if (options_.recompute != "none")
    refuse("--recompute ", options_.recompute, " applies to the GPT the trainer builds; a model ",
           "of the caller's own decides what it keeps for backward (autograd/checkpoint.h)");
  check_module_layout(options_, world_->size(), "a model of the caller's own");
  config_ = options_.model_config();
  engine_ =
      std::make_unique<ModuleEngine>(world_, std::move(parts), module_config(options_, device_));
  build_loaders();
  std::optional<ResumePoint> resume = find_resume(options_, *world_);
  if (resume_from_local(resume ? resume->data.step : -1)) {
  } else if (resume) {
    resume_from(*resume);
  } else if (world_->rank() == 0) {
    MetricsLog::truncate_after(metrics_path(options_), 0);  // as above
    MetricsLog::truncate_after(checkpoint_log_path(options_), 0);
  }
  if (world_->rank() == 0)
    write_file_atomic(options_.run_dir + "/config.json", options_.to_config_file().dump(2) + "\n");
}

Trainer::~Trainer() = default;

void Trainer::init_common() {
  const TrainOptions& o = options_;
  o.validate();
  trace_range_ = o.trace_range();
  if (o.threads > 0) set_num_threads(o.threads);
  // The device first: the NCCL world goes on it (each rank takes GPU local rank mod count).
  device_ = open_train_device(o.device, local_rank());
  if (!world_) world_ = default_world(device_, {.timeout_seconds = o.comm_timeout});
  if (!world_carries(*world_, device_))
    refuse("--device ", o.device, " under ", world_->size(), " ranks: the world communicator ",
           "given carries CPU tensors only; CUDA tensors travel over an NcclCommunicator");
  if (world_->size() == 1 && o.dp * o.tp * o.pp == 1) refuse_layout_flags_on_one_process(o);
  if (o.checkpoint_snapshot != "auto" && !sharded_checkpoints() && o.checkpoint_every_local == 0)
    refuse("--checkpoint-snapshot ", o.checkpoint_snapshot, " applies to sharded checkpoints ",
           "(several ranks, or --checkpoint-format sharded) and the node-local tier; this run ",
           "saves gathered ones only");
  fs::create_directories(o.run_dir);
  take_run_lock();
  // Every rank's flight recorder dumps into <run_dir>/flight when a call fails, a peer asks
  // or SIGUSR2 comes (parallel/comm/flight_watch.h); `tessera diagnose` merges the dumps.
  if (world_->size() > 1)
    flight_watch_ = std::make_unique<parallel::FlightWatch>(*world_, flight_dir(o));
  if (world_->size() > 1 && world_->rank() == 0 && o.straggler_every > 0)
    stragglers_.emplace(StragglerOptions{.interval = o.straggler_every});
  tokenizer_ = data::load_tokenizer(o.tokenizer);
  tokenizer_record_ = data::tokenizer_record(o.tokenizer);
  const int threads = num_threads();
  if (o.peak_gflops > 0) {
    // One rank's peak (one GPU's): the step's FLOPs are the job's, so the peak is all ranks'.
    // Before, N ranks read N times their MFU.
    peak_gflops_ = o.peak_gflops * world_->size();
    peak_text_ = str_cat(o.peak_gflops, " GFLOP/s (--peak-gflops)");
    if (world_->size() > 1)
      peak_text_ += str_cat(" per rank x ", world_->size(), " ranks = ", peak_gflops_, " GFLOP/s");
  } else if (!device_.is_cpu()) {
    // No table of GPU peaks here: the user states the one for the GPU and the precision.
    peak_text_ = "none stated: pass --peak-gflops (the GPU's dense peak) for MFU on cuda";
  } else {
    peak_gflops_ = cpu_peak_gflops(threads * world_->size(), &peak_text_);
    if (world_->size() > 1)
      peak_text_ += str_cat(", the ", world_->size(), " ranks' threads together");
  }
}

void Trainer::build_loaders() {
  const TrainOptions& o = options_;
  const int dp = engine_->dp_size(), rank = engine_->dp_rank();
  // Every dp rank reads only its rows: the global step is batch_size * grad_accum windows, of
  // which rank d takes the d-th 1/dp. The loader's state is the same on every rank and for
  // every dp that splits the same global step.
  data::LoaderOptions lo;
  lo.seq_len = o.seq_len;
  lo.seed = o.seed;
  lo.vocab_size = custom_model_ ? 0 : config_.vocab_size;
  lo.rank = rank;
  lo.world_size = dp;
  const int64_t global = o.batch_size * o.grad_accum;
  TESSERA_CHECK(global % dp == 0, "train: the global batch ", global, " (--batch-size x ",
                "--grad-accum) does not split over dp ", dp);
  lo.batch_size = global / dp;
  lo.shuffle = true;
  train_ = std::make_unique<data::DataLoader>(o.train_data, lo);
  if (!o.val_data.empty()) {
    TESSERA_CHECK(o.batch_size % dp == 0, "train: validation splits each --batch-size ",
                  o.batch_size, " batch over dp ", dp, ", which does not divide it");
    lo.batch_size = o.batch_size / dp;
    lo.shuffle = false;
    val_ = std::make_unique<data::DataLoader>(o.val_data, lo);
  }
}

data::Batch Trainer::next_rows() {
  return train_->next();
}

std::vector<RankMetrics> Trainer::gather_rank_metrics(const EngineStep& s,
                                                      const PhaseTimes& phases) {
  constexpr int64_t kFields = 14;
  const AllocatorStats device = allocator_for(device_).stats();
  Tensor mine = from_vector<double>(
      {s.comm_seconds * 1e3, double(s.comm_bytes), double(s.memory.parameters),
       double(s.memory.gradients), double(s.memory.optimizer_state), double(s.memory.activations),
       double(device.live_bytes), double(device.peak_bytes), double(s.memory.offloaded),
       phases.data_ms, phases.forward_ms, phases.backward_ms, phases.optimizer_ms, phases.step_ms},
      Shape{kFields});
  Tensor all = zeros(Shape{world_->size() * kFields}, DType::f64);
  world_->all_gather(mine, all);
  std::vector<double> v = to_vector<double>(all);
  std::vector<RankMetrics> ranks(size_t(world_->size()));
  for (size_t r = 0; r < ranks.size(); ++r) {
    const double* f = v.data() + r * kFields;
    ranks[r] = {f[0],          int64_t(f[1]),
                int64_t(f[2]), int64_t(f[3]),
                int64_t(f[4]), int64_t(f[5]),
                int64_t(f[6]), int64_t(f[7]),
                int64_t(f[8]), PhaseTimes{f[9], f[10], f[11], f[12], f[13]}};
  }
  return ranks;
}

StepMetrics Trainer::step() {
  TESSERA_CHECK(!done(), "Trainer::step: all ", options_.max_steps, " steps are done");
  const TrainOptions& o = options_;
  const bool planted = planted_ms_ > 0 && step_ + 1 >= planted_from_;
  const bool traced = step_ + 1 >= trace_range_.first && step_ + 1 <= trace_range_.second;
  if (traced && !trace_) trace_ = std::make_unique<parallel::StepTrace>(world_->rank());
  const bool traced_inside = traced && engine_->set_trace(trace_.get());
  const int64_t t0_us = parallel::flight_clock_us();
  const auto t0 = std::chrono::steady_clock::now();
  const data::Batch rows = next_rows();
  if (planted && planted_phase_ == "data")
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(planted_ms_));
  snapshot_wait_s_ = 0;
  const auto t1 = std::chrono::steady_clock::now();
  if (planted && planted_phase_ == "compute")  // busy, as a slower device would be
    while (
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count() <
        planted_ms_) {
    }
  const EngineStep s = engine_->step(rows.inputs, rows.targets);
  ++step_;
  PhaseTimes phases;
  phases.data_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  phases.step_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  phases.forward_ms = s.forward_seconds * 1e3;
  phases.backward_ms = s.backward_seconds * 1e3;
  phases.optimizer_ms = s.optimizer_seconds * 1e3;
  if (traced) trace_step(t0_us, phases, traced_inside, s.loss);

  StepMetrics m;
  m.step = step_;
  m.loss = s.loss;
  m.lr = s.lr;
  m.grad_norm = s.grad_norm;
  m.precision = o.precision;
  if (const nn::DynamicLossScaler* scaler = engine_->scaler()) {
    m.loss_scale = s.loss_scale;
    m.skipped = s.skipped;
    m.skipped_steps = scaler->skipped_steps();
  }
  const int64_t tokens_per_step = o.batch_size * o.grad_accum * o.seq_len;
  m.ms = s.seconds * 1e3;
  m.tokens_per_s = double(tokens_per_step) / s.seconds;
  const double fpt = custom_model_ ? 0.0 : flops_per_token(config_, o.seq_len);
  m.mfu = peak_gflops_ > 0 ? fpt * m.tokens_per_s / (peak_gflops_ * 1e9) : 0.0;
  const AllocatorStats st = allocator_for(device_).stats();
  m.live_bytes = st.live_bytes;
  m.peak_bytes = st.peak_bytes;
  m.rss_bytes = process_rss_bytes();
  if (update_fence_set_) m.snapshot_wait_ms = snapshot_wait_s_ * 1e3;
  m.phases = phases;
  m.comm_ms = s.comm_seconds * 1e3;
  m.time = unix_seconds();
  if (world_->size() > 1) {
    m.parallel = ParallelMetrics{s.bubble, gather_rank_metrics(s, phases)};
    if (stragglers_)
      for (const StragglerFlag& f : stragglers_->add(m.step, m.parallel->ranks))
        m.stragglers.push_back(f.describe(stragglers_->options().consecutive));
  }
  const bool last = done();
  if (val_ && ((o.eval_every > 0 && step_ % o.eval_every == 0) || last)) m.val_loss = evaluate();
  return m;
}

double Trainer::evaluate() {
  TESSERA_CHECK(val_ != nullptr, "Trainer::evaluate: no validation data (--val-data)");
  return validation_loss(*val_, options_, [&](const data::Batch& b) {
    return engine_->evaluate(b.inputs, b.targets);
  });
}

void Trainer::take_run_lock() {
  // Rank 0 takes it; every rank learns whether it could, so that all refuse together rather
  // than the others waiting for rank 0 in their first collective.
  std::string holder;
  if (world_->rank() == 0) run_lock_ = RunLock::take(options_.run_dir, &holder);
  const bool held_elsewhere = any_rank(!holder.empty());
  // Not a LayoutError (exit status 2, which `tessera launch` never retries): under a
  // supervisor the holder is a killed attempt that outlived the wait, and the next try passes.
  TESSERA_CHECK(!held_elsewhere, "train: ",
                holder.empty() ? str_cat("rank 0 found another job in ", options_.run_dir) : holder,
                "; two jobs would write one set of checkpoints. Wait for it, stop it, or give ",
                "another --run-dir");
}

bool Trainer::any_rank(bool mine) {
  if (world_->size() == 1) return mine;
  Tensor flag = from_vector<double>({mine ? 1.0 : 0.0}, Shape{1});
  world_->all_reduce(flag, parallel::CommOp::max);
  return flag.item<double>() > 0;
}

bool Trainer::agree_on_stop(const std::atomic<bool>* stop) {
  return any_rank(stop != nullptr && stop->load());
}

void Trainer::trace_step(int64_t begin_us, const PhaseTimes& phases, bool traced_inside,
                         double loss) {
  int64_t end_us = begin_us + int64_t((phases.data_ms + phases.step_ms) * 1e3);
  const int64_t data_end_us = begin_us + int64_t(phases.data_ms * 1e3);
  trace_->span(parallel::TraceTrack::step, "data", begin_us, data_end_us);
  if (!traced_inside) {
    trace_->span(parallel::TraceTrack::step, "engine", data_end_us, end_us);
  } else if (const auto [first, last] = trace_->extent(parallel::TraceTrack::step, data_end_us);
             last > 0) {
    // The engine's spans tile its own call; what lies around it in the step (the call and
    // its return, a descheduled thread) is the trainer's, so the track still tiles the step.
    end_us = std::max(end_us, last);
    if (first > data_end_us) trace_->span(parallel::TraceTrack::step, "trainer", data_end_us, first);
    if (end_us > last) trace_->span(parallel::TraceTrack::step, "trainer", last, end_us);
  }
  trace_->span(parallel::TraceTrack::step, str_cat("step ", step_), begin_us, end_us,
               {{"data_ms", phases.data_ms}, {"step_ms", phases.step_ms}, {"loss", loss}});
  trace_->add_calls(*world_->flight_recorder(), begin_us, end_us);
  engine_->set_trace(nullptr);
  if (step_ < trace_range_.second && !done()) return;
  const std::string dir = options_.run_dir + "/trace";
  fs::create_directories(dir);
  trace_->write(str_cat(dir, "/rank_", world_->rank(), ".json"));
  trace_.reset();
}

void Trainer::plant_delay(const std::string& phase, double ms, int64_t from_step) {
  TESSERA_CHECK(phase == "data" || phase == "compute", "Trainer::plant_delay: phase '", phase,
                "' is not data or compute");
  planted_phase_ = phase;
  planted_ms_ = ms;
  planted_from_ = from_step;
}

std::vector<int> Trainer::dump_flight_and_wait(const std::string& reason, double seconds) {
  if (!flight_watch_) return {};
  // A failed call dumped and asked the other ranks already (the recorder's hook).
  if (!flight_watch_->failed()) flight_watch_->dump_and_request(reason);
  return flight_watch_->wait_for_dumps(seconds);
}

std::string Trainer::banner() const {
  const TrainOptions& o = options_;
  std::ostringstream b;
  const int64_t tokens_per_step = o.batch_size * o.grad_accum * o.seq_len;
  b << "tessera train: resolved options\n" << o.to_json().dump(2) << "\n";
  if (!custom_model_) {
    b << "model: " << config_.to_json().dump() << "\n"
      << "parameters: " << nn::GPT::count_parameters(config_)
      << " | tokens/step: " << tokens_per_step << " | FLOPs/token: " << std::setprecision(4)
      << flops_per_token(config_, o.seq_len) / 1e6 << " M";
  } else {
    b << "model: the caller's | tokens/step: " << tokens_per_step;
  }
  b << " | threads: " << num_threads();
  if (world_->size() > 1) b << " per rank x " << world_->size() << " ranks";
  b << "\nlayout: " << engine_->describe() << "\n"
    << "MFU is against a peak of " << peak_text_ << "\n";
  if (val_) {
    // The split may hold fewer batches than asked for: the loss is over those it has.
    const int64_t held = val_->batches_per_epoch(), n = std::min(o.eval_batches, held);
    b << "validation: " << n << " batches of " << o.batch_size << " x " << o.seq_len;
    if (n < o.eval_batches)
      b << " (--eval-batches " << o.eval_batches << "; the split holds " << held << ")";
    if (o.eval_every > 0) b << ", every " << o.eval_every << " steps and";
    b << " at the end\n";
  }
  b << "device: " << device_ << (o.device == "cuda-sim" ? " (the kernel simulator)" : "")
    << " | precision: " << precision_banner(o) << "\n";
  b << skipped_checkpoints_ << local_note_;
  if (!resumed_from_.empty()) b << "resuming from " << resumed_from_ << "\n";
  if (!optimizer_note_.empty())
    b << "optimizer state not restored (it starts from zero): " << optimizer_note_ << "\n";
  return b.str();
}

FitResult Trainer::fit(std::ostream* out, const std::atomic<bool>* stop) {
  const TrainOptions& o = options_;
  const bool rank0 = world_->rank() == 0;
  FitResult result;
  result.start_step = step_;
  if (!resumed_from_.empty()) result.checkpoint = resumed_from_;
  if (out != nullptr && rank0) *out << banner() << std::flush;
  // Rerunning a finished run's command is normal (a retry after success); said, not silent.
  if (out != nullptr && rank0 && done())
    *out << "nothing to train: the run is at step " << step_ << ", --max-steps is " << o.max_steps
         << "; raise --max-steps to train on\n";
  std::optional<MetricsLog> log;
  std::optional<MetricsLog> saves;
  std::optional<TensorBoardWriter> board;
  if (rank0) {
    log.emplace(metrics_path(o));
    saves.emplace(checkpoint_log_path(o));
    if (!o.tensorboard.empty()) board.emplace(o.tensorboard, step_);
  }
  const double save_allow = std::max(o.save_timeout, o.comm_timeout);
  auto beat = [&](const char* phase, double allow = 0) {
    if (heartbeat_) heartbeat_->beat(phase, step_, result.start_step, allow);
  };
  beat("setup");
  const auto fit_start = std::chrono::steady_clock::now();
  bool mfu_warned = false;
  while (!done()) {
    StepMetrics m = step();
    beat("step");
    result.final_loss = m.loss;
    if (m.val_loss) result.final_val_loss = m.val_loss;
    if (rank0) {
      const bool live = out != nullptr && live_progress_;
      if (live) *out << kClearLine;
      if (out != nullptr && (m.step % o.log_every == 0 || done() || m.val_loss))
        *out << m.console_line(o.max_steps) << "\n";
      if (out != nullptr)
        for (const std::string& line : m.stragglers) *out << line << "\n";
      // Past 100% the stated peak is wrong, not the run: said once rather than shown as fact.
      if (out != nullptr && m.mfu > 1 && !mfu_warned) {
        mfu_warned = true;
        std::ostringstream w;  // four digits here, the caller's stream left as it was
        w << std::setprecision(4) << "warning: step " << m.step << " ran at "
          << m.mfu * peak_gflops_ << " GFLOP/s, " << 100 * m.mfu << "% of the peak of "
          << peak_text_ << "; MFU above 100% means that peak is too low (--peak-gflops is one "
          << "rank's dense peak for the precision)\n";
        *out << w.str();
      }
      if (live) {
        const double elapsed = seconds_since(fit_start);
        const double per_step = elapsed / double(m.step - result.start_step);
        *out << m.progress_line(o.max_steps, elapsed, per_step * double(o.max_steps - m.step));
      }
      if (out != nullptr) *out << std::flush;
    }
    const bool stopping = agree_on_stop(stop);
    const bool durable =
        (o.checkpoint_every > 0 && m.step % o.checkpoint_every == 0) || done() || stopping;
    const bool local =
        !durable && o.checkpoint_every_local > 0 && m.step % o.checkpoint_every_local == 0;
    if (durable || local) {
      beat("save", save_allow);
      const auto t0 = std::chrono::steady_clock::now();
      if (durable)
        result.checkpoint = save(o.sync_save);
      else
        save_local();
      const double stall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      beat("saved");
      m.checkpoint_ms = stall * 1e3;
      // What the loop spent in the save on rank 0, and the host memory its snapshot held beyond
      // the state (a copy or a staging: the part; a stream: nothing, or a GPU's chunk; a
      // gathered save in the loop uses no writer).
      const bool gathered = durable && !sharded_checkpoints();
      using Snapshot = nn::CheckpointWriter::Snapshot;
      const Snapshot mode = gathered ? Snapshot::copy : snapshot_mode();
      if (rank0)
        saves->append(
            {{"step", m.step},
             {"tier", durable ? "durable" : "local"},
             {"stall_ms", stall * 1e3},
             {"format", local      ? "local"
                        : gathered ? "gathered"
                                   : "sharded"},
             {"snapshot", mode == Snapshot::stream   ? "stream"
                          : mode == Snapshot::staged ? "staged"
                                                     : "copy"},
             {"snapshot_bytes", gathered && o.sync_save ? 0 : writer_->last_snapshot_bytes()},
             {"sync", durable && o.sync_save}});
    }
    // The step's record once its save (if any) is done: it carries the save's stall.
    if (rank0) {
      log->append(m.to_json());
      if (board) board->add_scalars(m.step, m.scalars());
    }
    if (stopping && !done()) {
      result.interrupted = true;
      if (out != nullptr && rank0)
        *out << (live_progress_ ? kClearLine : "") << "interrupted after step " << m.step
             << ": checkpoint saved to " << result.checkpoint
             << "; run the same command to resume\n";
      break;
    }
  }
  if (out != nullptr && live_progress_ && rank0) *out << kClearLine << std::flush;
  wait_for_save();  // the run's last checkpoint is on disk when fit returns
  result.final_step = step_;
  return result;
}

}  // namespace tessera::train
