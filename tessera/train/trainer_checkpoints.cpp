// The Trainer's checkpoints (trainer.h): resuming from the durable tier (gathered or sharded,
// under any layout) or the node-local tier, and saving to either. A save snapshots the state
// (a copy, a stream the writer reads through one chunk, or host buffers staged from the GPU)
// and writes it in the background; docs/resilience.md tells the whole story.

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>

#include "tessera/core/ops/creation.h"
#include "tessera/nn/io/checkpoint.h"
#include "tessera/nn/io/local_checkpoint.h"
#include "tessera/train/detail/engine_config.h"
#include "tessera/train/detail/layout_engine.h"
#include "tessera/train/detail/snapshot_staging.h"
#include "tessera/train/trainer.h"
#include "tessera/train/world.h"

namespace tessera::train {

namespace fs = std::filesystem;

bool Trainer::resume_by_part(const ResumePoint& resume, bool optimizer,
                             const std::function<bool(const nlohmann::json* scalars)>& load) {
  const nlohmann::json& state = resume.data.state;
  bool read = false;
  try {
    read = load(optimizer ? &state["optimizer"] : nullptr);
  } catch (const Error& e) {
    detail::throw_error("train: resuming from ", resume.dir, ": ", e.what());
  }
  if (!read) return false;
  optimizer_note_ = optimizer ? "" : "the checkpoint holds no optimizer state";
  restore_progress(state, resume.data.step, resume.dir);
  skipped_checkpoints_ = describe_skipped(resume);
  return true;
}

void Trainer::resume_from(const ResumePoint& resume) {
  const bool scalars = resume.data.state.contains("optimizer");
  if (resume.set) {
    // A sharded set: each rank reads the part it holds, unless the engine takes the
    // single-process state, for which the set is read whole.
    const nn::ShardedSet& set = *resume.set;
    const bool optimizer =
        scalars && std::any_of(set.tensors.begin(), set.tensors.end(),
                               [](const nn::ShardedSet::StoredTensor& t) { return t.optimizer; });
    if (resume_by_part(resume, optimizer, [&](const nlohmann::json* optimizer_scalars) {
          return engine_->load_checkpoint_set(set, optimizer_scalars);
        }))
      return;
    resume_from(
        {resume.dir, nn::read_sharded_checkpoint(set), nullptr, nullptr, nullptr, resume.skipped});
    return;
  }
  if (resume.model_files) {
    // A single-process checkpoint opened by range: each rank of a layout reads its part; an
    // engine that takes the single-process state gets the files read whole.
    const bool optimizer = scalars && !resume.optimizer_files->tensors().empty();
    if (resume_by_part(resume, optimizer, [&](const nlohmann::json* optimizer_scalars) {
          return engine_->load_checkpoint_files(*resume.model_files,
                                                optimizer ? resume.optimizer_files.get() : nullptr,
                                                optimizer_scalars);
        }))
      return;
    ResumePoint whole = resume;
    whole.model_files = whole.optimizer_files = nullptr;
    whole.data.model = resume.model_files->read_all();
    whole.data.optimizer = resume.optimizer_files->read_all();
    resume_from(whole);
    return;
  }
  engine_->load_model(resume.data.model);
  // Whichever layout (or one process) wrote it, every rank loads its part; a state of another
  // optimizer is refused in one line naming the file (restore_optimizer).
  optimizer_note_ = restore_optimizer(
      resume, [&](const nn::OptimizerState& opt) { engine_->load_optimizer(opt); });
  restore_progress(resume.data.state, resume.data.step, resume.dir);
  skipped_checkpoints_ = describe_skipped(resume);
}

void Trainer::restore_progress(const nlohmann::json& state, int64_t step, const std::string& dir) {
  train_->restore(data::LoaderState::from_json(state.at("loader")));
  if (state.contains("precision")) engine_->load_precision_state(state["precision"]);
  step_ = step;
  engine_->set_step(step_);
  if (world_->rank() == 0) {
    MetricsLog::truncate_after(metrics_path(options_), step_);
    MetricsLog::truncate_after(checkpoint_log_path(options_), step_);
  }
  resumed_from_ = dir;
}

std::string Trainer::canonical_run_dir() const {
  std::error_code ec;
  return fs::weakly_canonical(fs::absolute(options_.run_dir), ec).string();
}

std::string Trainer::local_dir() const {
  if (!options_.local_dir.empty()) return options_.local_dir;
  const std::string run = canonical_run_dir();
  char hash[32];  // libstdc++'s string hash is unseeded: the same folder at every restart
  std::snprintf(hash, sizeof hash, "%016zx", std::hash<std::string>{}(run));
  const char* tmp = std::getenv("TMPDIR");
  return (fs::path(tmp != nullptr && *tmp != 0 ? tmp : "/tmp") / "tessera-local" / hash).string();
}

nlohmann::json Trainer::local_fingerprint(const LocalState& state) const {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& [name, t] : state.tensors)
    tensors.push_back({name, dtype_name(t.dtype()), t.shape().to_string()});
  const nlohmann::json options = options_.to_json();
  nlohmann::json data = nlohmann::json::object();
  for (const char* key : kDataOrderOptions) data[key] = options[key];
  return {{"rank", world_->rank()},
          {"ranks", world_->size()},
          {"host", host},
          {"run_dir", canonical_run_dir()},
          {"layout", engine_->layout_json()},
          {"data", data},
          {"tensors", tensors}};
}

bool Trainer::resume_from_local(int64_t durable_step) {
  if (options_.checkpoint_every_local == 0 || options_.resume != "auto") return false;
  std::string why;
  const std::string rank_dir = nn::local_rank_dir(local_dir(), world_->rank());
  const nlohmann::json fingerprint = local_fingerprint(engine_->local_state());
  const std::vector<int64_t> held = nn::usable_local_checkpoints(rank_dir, fingerprint, &why);
  // The newest step every rank holds: the least of the ranks' newest, if each holds it (a
  // rank killed mid-write still holds the set before its newest). One all-reduce for the
  // range, one for whether every rank holds its low end.
  const double mine = held.empty() ? -1.0 : double(held.front());
  Tensor range = from_vector<double>({mine, -mine}, Shape{2});
  world_->all_reduce(range, parallel::CommOp::max);
  const std::vector<double> r = to_vector<double>(range);
  const int64_t newest = int64_t(r[0]), oldest = int64_t(-r[1]);
  const bool mine_holds = std::find(held.begin(), held.end(), oldest) != held.end();
  Tensor all = from_vector<double>({mine_holds ? 0.0 : 1.0}, Shape{1});
  world_->all_reduce(all, parallel::CommOp::max);
  const bool shared = oldest >= 0 && all.item<double>() == 0.0;
  if (shared && oldest > durable_step) {
    nn::LocalCheckpoint local = nn::load_local_checkpoint(rank_dir, oldest, fingerprint);
    nlohmann::json scalars = local.state.value("optimizer", nlohmann::json::object());
    engine_->load_local_state({std::move(local.tensors), scalars});
    restore_progress(local.state, local.step, local.dir);
    local_note_ =
        str_cat("resuming from the node-local tier (every rank holds step ", oldest,
                "; the durable tier's newest is ",
                durable_step < 0 ? std::string("none") : std::to_string(durable_step), ")\n");
    return true;
  }
  const bool refused = !why.empty() && !why.starts_with("no local checkpoint");
  if (newest > durable_step || refused)
    local_note_ =
        str_cat("not resuming from the node-local tier: the ranks' newest sets are of ", "steps ",
                oldest, " to ", newest, " (-1: none usable), and no step newer ",
                "than the durable tier's is held by every rank; rank ", world_->rank(), ": ",
                held.empty() ? why
                             : str_cat("steps held ", held.front(),
                                       held.size() > 1 ? str_cat(", ", held[1]) : std::string(),
                                       why.empty() ? std::string() : "; " + why),
                "\n");
  return false;
}

std::string Trainer::save_local() {
  const nn::CheckpointWriter::Snapshot snapshot = begin_snapshot();
  LocalState live = engine_->local_state();
  const nlohmann::json fingerprint = local_fingerprint(live);
  const nlohmann::json state = checkpoint_state(live.optimizer_scalars, /*durable=*/false);
  std::vector<Tensor*> tensors;
  for (auto& [name, t] : live.tensors) tensors.push_back(&t);
  const int64_t staged = stage_snapshot(snapshot, tensors);
  return writer_->save_local(nn::local_rank_dir(local_dir(), world_->rank()), step_,
                             std::move(live.tensors), fingerprint, state, snapshot,
                             snapshot_land(snapshot), staged);
}

void Trainer::load(const std::string& checkpoint_dir) {
  nn::LoadedCheckpoint given =
      open_checkpoint_together(*world_, checkpoint_dir, uses_layout_engine(options_));
  resume_from({checkpoint_dir,
               std::move(given.data),
               std::move(given.set),
               std::move(given.model_files),
               std::move(given.optimizer_files),
               {}});
}

void Trainer::wait_for_save() {
  if (writer_) writer_->wait();
}

nlohmann::json Trainer::checkpoint_state(const nlohmann::json& optimizer_scalars,
                                         bool durable) const {
  nlohmann::json state = {{"options", options_.to_json()},
                          {"optimizer", optimizer_scalars},
                          {"loader", train_->state().to_json()},
                          {"precision", engine_->precision_state()}};
  // A GPT's config (generate and ckpt rebuild the model from it); a model of the caller's own
  // has none.
  if (!custom_model_) state["model_config"] = config_.to_json();
  const nlohmann::json layout = engine_->layout_json();
  if (!layout.empty()) state["parallel"] = layout;
  if (durable) state["tokenizer"] = tokenizer_record_;
  return state;
}

bool Trainer::sharded_checkpoints() const {
  return options_.checkpoint_format == "sharded" ||
         (options_.checkpoint_format == "auto" && world_->size() > 1);
}

std::string Trainer::save(bool wait) {
  if (sharded_checkpoints()) return save_sharded(wait);
  nn::StateDict model = engine_->gather_model();
  nn::OptimizerState optimizer = engine_->gather_optimizer();
  if (world_->rank() == 0) {
    nn::CheckpointData data;
    data.step = step_;
    data.model = std::move(model);
    data.optimizer = std::move(optimizer.tensors);
    data.state = checkpoint_state(optimizer.scalars, /*durable=*/true);
    if (wait) {
      wait_for_save();  // in step order, after any background save
      nn::save_checkpoint(options_.run_dir, data, options_.keep_checkpoints);
    } else {
      if (!writer_) writer_ = std::make_unique<nn::CheckpointWriter>();
      writer_->save(options_.run_dir, data, options_.keep_checkpoints);
    }
  }
  // Rank 0 may write (or wait for its previous background write) for longer than a
  // collective may wait: the others wait here under the save's own limit.
  world_->barrier(std::max(options_.save_timeout, options_.comm_timeout));
  return (fs::path(nn::checkpoints_dir(options_.run_dir)) / nn::checkpoint_name(step_)).string();
}

nn::CheckpointWriter::Snapshot Trainer::snapshot_mode() const {
  using Snapshot = nn::CheckpointWriter::Snapshot;
  const std::string& mode = options_.checkpoint_snapshot;
  if (mode == "auto") return device_.is_cpu() ? Snapshot::stream : Snapshot::staged;
  return mode == "stream" ? Snapshot::stream : mode == "staged" ? Snapshot::staged : Snapshot::copy;
}

nn::CheckpointWriter::Snapshot Trainer::begin_snapshot() {
  using Snapshot = nn::CheckpointWriter::Snapshot;
  if (!writer_) writer_ = std::make_unique<nn::CheckpointWriter>();
  const Snapshot snapshot = snapshot_mode();
  if (snapshot != Snapshot::copy && !update_fence_set_) {
    // A streamed write reads the live state, a staged one downloads or copies it: the next
    // update waits until the bytes are in the file, or in host memory.
    engine_->set_before_update([this] { snapshot_wait_s_ += writer_->wait_for_snapshot(); });
    update_fence_set_ = true;
  }
  return snapshot;
}

int64_t Trainer::stage_snapshot(nn::CheckpointWriter::Snapshot snapshot,
                                const std::vector<Tensor*>& tensors) {
  using Snapshot = nn::CheckpointWriter::Snapshot;
  if (snapshot == Snapshot::copy || device_.is_cpu()) return 0;
  if (!staging_) staging_ = std::make_unique<SnapshotStaging>(device_);
  if (snapshot == Snapshot::staged) return staging_->stage(tensors);
  // A stream of GPU state: the writer reads it from its own thread through one chunk, once
  // the device has run what still writes it (the last update; and the state's pieces, which
  // the engine may have queued as copies). The chunk is no larger than the largest tensor
  // read through it; a later save with a larger one (the node-local tier's whole tensors)
  // grows it, up to --checkpoint-chunk-mb.
  int64_t largest = 0;
  for (const Tensor* t : tensors)
    if (!t->device().is_cpu()) largest = std::max(largest, int64_t(t->nbytes()));
  const int64_t chunk = std::min(options_.checkpoint_chunk_bytes(), largest);
  if (chunk > chunk_bytes_) {
    writer_->set_chunked_reads(staging_->chunked_reads(chunk));
    chunk_bytes_ = chunk;
  }
  staging_->settle();
  return 0;
}

std::function<void()> Trainer::snapshot_land(nn::CheckpointWriter::Snapshot snapshot) {
  if (snapshot != nn::CheckpointWriter::Snapshot::staged || device_.is_cpu()) return {};
  return [this] { staging_->land(); };
}

std::string Trainer::save_sharded(bool wait) {
  const double allow = std::max(options_.save_timeout, options_.comm_timeout);
  const bool rank0 = world_->rank() == 0;
  const nn::CheckpointWriter::Snapshot snapshot = begin_snapshot();
  // Each rank's previous write is done (rank 0's published its set) before this save starts,
  // and a stale manifest of this step is gone before any rank writes into its directory.
  wait_for_save();
  if (rank0) nn::begin_sharded_save(options_.run_dir, step_);
  world_->barrier(allow);
  // The save's nonce, from rank 0: rank 0 publishes only shards that carry it, never ones an
  // earlier save of the same step left. Two 32-bit halves, exact in f64.
  Tensor nonce = zeros(Shape{2}, DType::f64);
  if (rank0) {
    std::random_device rd;
    nonce = from_vector<double>({double(rd()), double(rd())}, Shape{2});
  }
  world_->all_reduce(nonce, parallel::CommOp::sum);
  const std::vector<double> halves = to_vector<double>(nonce);
  OwnedState owned = engine_->owned_state();
  nn::ShardJob job;
  job.run_dir = options_.run_dir;
  job.step = step_;
  job.rank = world_->rank();
  job.ranks = world_->size();
  job.nonce = nn::checkpoint_nonce((uint64_t(halves[0]) << 32) | uint64_t(halves[1]));
  job.pieces = std::move(owned.pieces);
  if (rank0) {
    job.state = checkpoint_state(owned.optimizer_scalars, /*durable=*/true);
    job.keep = options_.keep_checkpoints;
    job.publish_timeout = allow;
  }
  std::vector<Tensor*> tensors;
  for (nn::ShardPiece& p : job.pieces) tensors.push_back(&p.data);
  const int64_t staged = stage_snapshot(snapshot, tensors);
  const std::string dir =
      writer_->save_shard(std::move(job), snapshot, snapshot_land(snapshot), staged);
  if (wait) {
    wait_for_save();
    world_->barrier(allow);  // rank 0 has published the set
  }
  return dir;
}

}  // namespace tessera::train
