#include "cli/parallel_training.h"

#include <mpi.h>

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "cli/metrics.h"
#include "cli/train_common.h"
#include "tessera/parallel/comm/mpi_communicator.h"
#include "tessera/parallel/engine/parallel_trainer.h"
#include "tessera/tessera.h"

namespace tessera::cli {

namespace {

namespace fs = std::filesystem;
using parallel::Communicator;
using parallel::ParallelTrainer;

bool mpi_started() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
}

template <class... Parts>
[[noreturn]] void refuse(const Parts&... parts) {
  throw LayoutError(str_cat("tessera train: ", parts...));
}

// The engine's config for o, or a LayoutError naming what does not fit. The same on every rank
// (it reads only the options, the model config and the world size), so no rank goes on alone.
parallel::ParallelConfig parallel_config(const TrainOptions& o, const nn::GPTConfig& model,
                                         int world_size) {
  if (o.device != "cpu") refuse("a parallel layout runs on the CPU; got --device ", o.device);
  if (o.optimizer != "adamw")
    refuse("a parallel layout trains with adamw; got --optimizer ", o.optimizer);
  parallel::ParallelConfig p;
  p.mesh = {int(o.dp), int(o.pp), int(o.tp)};
  p.zero_stage = int(o.zero);
  p.microbatches = int(o.microbatches);
  p.schedule = parallel::parse_schedule_kind(o.schedule);
  p.virtual_stages = int(o.virtual_stages);
  p.sequence_parallel = o.sequence_parallel;
  // The step's global batch: what one process consumes over its grad_accum micro-batches.
  p.batch_size = o.batch_size * o.grad_accum;
  p.seq_len = o.seq_len;
  p.adamw = {
      .lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = o.weight_decay};
  p.lr_schedule = o.lr_schedule();
  p.max_grad_norm = o.grad_clip;
  p.precision = o.precision_policy();
  p.loss_scaler = o.loss_scaler();
  std::string why = parallel::layout_error(p, model, world_size);
  if (!why.empty() && p.mesh.world_size() != world_size)
    why += str_cat(" (start it as mpiexec -n ", p.mesh.world_size(), " tessera train ...)");
  if (!why.empty()) refuse(why);
  if (!o.val_data.empty() && o.batch_size % o.dp != 0)
    refuse("validation splits each --batch-size ", o.batch_size, " batch over dp ", o.dp,
           ", which does not divide it");
  return p;
}

// grad_accum loader batches stacked: the rows one process trains on in one step, in its order.
data::Batch next_global_batch(data::DataLoader& loader, int64_t grad_accum) {
  if (grad_accum == 1) return loader.next();
  std::vector<Tensor> inputs, targets;
  for (int64_t i = 0; i < grad_accum; ++i) {
    data::Batch b = loader.next();
    inputs.push_back(b.inputs);
    targets.push_back(b.targets);
  }
  return {ops::cat(inputs, 0), ops::cat(targets, 0)};
}

// Every rank's communication time and bytes, rank 0 first. Collective over world.
std::vector<RankMetrics> gather_rank_metrics(Communicator& world,
                                             const parallel::ParallelStepStats& s) {
  constexpr int64_t kFields = 5;
  Tensor mine = from_vector<double>(
      {s.comm_seconds * 1e3, double(s.memory.parameters), double(s.memory.gradients),
       double(s.memory.optimizer_state), double(s.memory.activations)},
      Shape{kFields});
  Tensor all = zeros(Shape{world.size() * kFields}, DType::f64);
  world.all_gather(mine, all);
  std::vector<double> v = to_vector<double>(all);
  std::vector<RankMetrics> ranks(size_t(world.size()));
  for (size_t r = 0; r < ranks.size(); ++r) {
    const double* f = v.data() + r * kFields;
    ranks[r] = {f[0], int64_t(f[1]), int64_t(f[2]), int64_t(f[3]), int64_t(f[4])};
  }
  return ranks;
}

// Whether any rank was asked to stop (so all stop after the same step). Collective over world.
bool agree_on_stop(Communicator& world, const std::atomic<bool>& stop) {
  Tensor flag = from_vector<double>({stop.load() ? 1.0 : 0.0}, Shape{1});
  world.all_reduce(flag, parallel::CommOp::max);
  return flag.item<double>() > 0;
}

// Rank 0 publishes the gathered model and optimizer state, a single-process checkpoint with the
// layout in state.json. Returns the checkpoint's name. Collective over world.
std::string save(ParallelTrainer& trainer, Communicator& world, const TrainOptions& o,
                 const data::DataLoader& train) {
  const int64_t step = trainer.steps_done();
  nn::StateDict model = trainer.gather_full_state();
  nn::OptimizerState optimizer = trainer.gather_full_optimizer_state();
  const parallel::ParallelConfig& pc = trainer.config();
  if (world.rank() == 0) {
    nn::CheckpointData data;
    data.step = step;
    data.model = std::move(model);
    data.optimizer = std::move(optimizer.tensors);
    data.state = {{"options", o.to_json()},
                  {"optimizer", optimizer.scalars},
                  {"model_config", trainer.model_config().to_json()},
                  {"loader", train.state().to_json()},
                  {"precision", trainer.precision().state()},
                  {"parallel",
                   {{"dp", pc.mesh.dp},
                    {"tp", pc.mesh.tp},
                    {"pp", pc.mesh.pp},
                    {"virtual_stages", pc.virtual_stages},
                    {"zero", pc.zero_stage},
                    {"layout", pc.describe()}}}};
    nn::save_checkpoint(o.run_dir, data, o.keep_checkpoints);
  }
  world.barrier();
  return nn::checkpoint_name(step);
}

TrainResult train(const TrainOptions& o, const nn::GPTConfig& config,
                  const parallel::ParallelConfig& pc, const std::optional<ResumePoint>& resume,
                  const nn::StateDict& imported, const data::Tokenizer& tokenizer,
                  std::ostream& out, const std::atomic<bool>& stop) {
  std::shared_ptr<Communicator> world = parallel::MpiCommunicator::world();
  const bool rank0 = world->rank() == 0;
  ParallelTrainer trainer(world, config, pc);
  for (const auto& chunk : trainer.chunks()) chunk->set_dropout_seed(o.seed);
  if (!imported.empty()) trainer.load_full_state(imported);
  std::unique_ptr<data::DataLoader> loader = make_loader(o, o.train_data, config.vocab_size, true);
  std::unique_ptr<data::DataLoader> val;
  if (!o.val_data.empty()) val = make_loader(o, o.val_data, config.vocab_size, false);

  TrainResult result;
  std::string optimizer_note;
  if (resume) {
    const nlohmann::json& state = resume->data.state;
    trainer.load_full_state(resume->data.model);
    const std::string saved_optimizer =
        state.contains("options") ? state["options"].value("optimizer", "adamw") : "adamw";
    if (saved_optimizer != "adamw") {
      optimizer_note = str_cat("the checkpoint's optimizer is ", saved_optimizer);
    } else {
      // Gathered whichever layout (or one process) wrote it: every rank loads its slices.
      optimizer_note = restore_optimizer(
          *resume, [&](const nn::OptimizerState& opt) { trainer.load_full_optimizer_state(opt); });
    }
    loader->restore(data::LoaderState::from_json(state.at("loader")));
    if (state.contains("precision")) trainer.precision().load_state(state["precision"]);
    trainer.set_step(resume->data.step);
    if (rank0) MetricsLog::truncate_after(metrics_path(o), resume->data.step);
    result.checkpoint = nn::checkpoint_name(resume->data.step);
  }
  result.start_step = trainer.steps_done();
  if (rank0) write_file_atomic(o.run_dir + "/config.json", o.to_json().dump(2) + "\n");

  const int threads = num_threads();
  std::string peak_text;
  double peak = o.peak_gflops;
  if (peak > 0) {
    peak_text = str_cat(o.peak_gflops, " GFLOP/s (--peak-gflops)");
  } else {
    peak = cpu_peak_gflops(threads * world->size(), &peak_text);
    peak_text += str_cat(", the ", world->size(), " ranks' threads together");
  }
  const double fpt = flops_per_token(config, o.seq_len);
  const int64_t tokens_per_step = pc.batch_size * o.seq_len;
  if (rank0) {
    out << "tessera train: resolved options\n"
        << o.to_json().dump(2) << "\n"
        << "model: " << config.to_json().dump() << "\n"
        << "parameters: " << nn::GPT::count_parameters(config)
        << " | tokens/step: " << tokens_per_step << " | FLOPs/token: " << std::setprecision(4)
        << fpt / 1e6 << " M | threads: " << threads << " per rank x " << world->size()
        << " ranks\nlayout: " << trainer.describe() << "\n"
        << "MFU is against a peak of " << peak_text << "\n"
        << "device: cpu | precision: " << precision_banner(o) << "\n";
    if (resume)
      out << "resuming from " << o.run_dir << "/checkpoints/" << result.checkpoint << "\n";
    if (!optimizer_note.empty())
      out << "optimizer state not restored (it starts from zero): " << optimizer_note << "\n";
    out << std::flush;
  }

  std::optional<MetricsLog> log;
  if (rank0) log.emplace(metrics_path(o));
  Allocator& alloc = allocator_for(Device::cpu());
  while (trainer.steps_done() < o.max_steps) {
    data::Batch b = next_global_batch(*loader, o.grad_accum);
    const parallel::ParallelStepStats st = trainer.step(b.inputs, b.targets);
    const int64_t step = trainer.steps_done();
    StepMetrics m;
    m.step = step;
    m.loss = result.final_loss = st.loss;
    m.lr = st.lr;
    m.grad_norm = st.grad_norm;
    m.precision = o.precision;
    if (const nn::DynamicLossScaler* scaler = trainer.precision().scaler()) {
      m.loss_scale = st.loss_scale;
      m.skipped = st.skipped;
      m.skipped_steps = scaler->skipped_steps();
    }
    m.ms = st.seconds * 1e3;
    m.tokens_per_s = double(tokens_per_step) / st.seconds;
    m.mfu = peak > 0 ? fpt * m.tokens_per_s / (peak * 1e9) : 0.0;
    AllocatorStats as = alloc.stats();
    m.live_bytes = as.live_bytes;
    m.peak_bytes = as.peak_bytes;
    m.rss_bytes = process_rss_bytes();
    m.parallel = ParallelMetrics{st.bubble, gather_rank_metrics(*world, st)};
    const bool last = step == o.max_steps;
    if (val && ((o.eval_every > 0 && step % o.eval_every == 0) || last)) {
      m.val_loss = validation_loss(
          *val, o, [&](const data::Batch& v) { return trainer.evaluate(v.inputs, v.targets); });
      result.final_val_loss = m.val_loss;
    }
    if (rank0) {
      log->append(m.to_json());
      if (step % o.log_every == 0 || last || m.val_loss)
        out << m.console_line(o.max_steps) << "\n" << std::flush;
    }
    const bool stopping = agree_on_stop(*world, stop);
    if ((o.checkpoint_every > 0 && step % o.checkpoint_every == 0) || last || stopping)
      result.checkpoint = save(trainer, *world, o, *loader);
    if (stopping && !last) {
      result.interrupted = true;
      if (rank0)
        out << "interrupted after step " << step << ": checkpoint saved to " << result.checkpoint
            << "; run the same command to resume\n";
      break;
    }
  }
  result.final_step = trainer.steps_done();
  if (!result.interrupted && o.sample_tokens > 0) {
    nn::StateDict full = trainer.gather_full_state();
    if (rank0) {
      nn::GPT model(config);
      model.load_state_dict(full);
      print_samples(model, config, tokenizer, o, Device::cpu(), out);
    }
  }
  return result;
}

}  // namespace

int mpi_world_size() {
  return mpi_started() ? parallel::MpiCommunicator::world()->size() : 1;
}

int mpi_world_rank() {
  return mpi_started() ? parallel::MpiCommunicator::world()->rank() : 0;
}

TrainResult run_parallel_training(const TrainOptions& o, std::ostream& out,
                                  const std::atomic<bool>& stop) {
  // Up to the layout check every rank reads the same options and files: an error here is the
  // same on every rank, before any collective.
  if (o.threads > 0) set_num_threads(o.threads);
  fs::create_directories(o.run_dir);
  std::optional<ResumePoint> resume = find_resume(o);
  std::unique_ptr<data::Tokenizer> tokenizer = data::load_tokenizer(o.tokenizer);
  nn::StateDict imported;
  const nn::GPTConfig config =
      resolve_config(o, *tokenizer, resume ? &*resume : nullptr, &imported);
  const parallel::ParallelConfig pc = parallel_config(o, config, mpi_world_size());
  try {
    return train(o, config, pc, resume, imported, *tokenizer, out, stop);
  } catch (const std::exception& e) {
    // From here a rank may fail alone (a file it writes, a collective timing out) while the
    // others wait on it: say which rank, and end the whole job. One write per line, so that
    // ranks failing at once print whole lines rather than interleaved pieces.
    const std::string line =
        str_cat("tessera train: rank ", mpi_world_rank(), ": ", e.what(), "\n");
    std::cerr.write(line.data(), std::streamsize(line.size()));
    std::cerr.flush();
    MPI_Abort(MPI_COMM_WORLD, 1);
    throw;
  }
}

}  // namespace tessera::cli
