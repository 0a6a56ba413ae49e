#include "tessera/nn/io/checkpoint_writer.h"

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "tessera/core/error.h"
#include "tessera/core/ops/movement.h"

namespace tessera::nn {

namespace {

// A copy the writer owns: the training loop updates its tensors in place right after save().
StateDict snapshot(const StateDict& dict, int64_t& bytes) {
  StateDict out;
  out.reserve(dict.size());
  for (const auto& [name, t] : dict) {
    out.emplace_back(name, ops::clone(t));
    bytes += int64_t(t.nbytes());
  }
  return out;
}

}  // namespace

CheckpointWriter::CheckpointWriter() : thread_([this] { run(); }) {}

CheckpointWriter::~CheckpointWriter() {
  try {
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera: %s\n", e.what());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string CheckpointWriter::save(const std::string& run_dir, const CheckpointData& data,
                                   int64_t keep) {
  wait();
  CheckpointData copy;
  int64_t bytes = 0;
  copy.step = data.step;
  copy.model = snapshot(data.model, bytes);
  copy.optimizer = snapshot(data.optimizer, bytes);
  copy.state = data.state;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    run_dir_ = run_dir;
    job_ = std::move(copy);
    keep_ = keep;
    job_bytes_ = last_bytes_ = bytes;
    busy_ = true;
  }
  cv_.notify_all();
  return (std::filesystem::path(checkpoints_dir(run_dir)) / checkpoint_name(data.step)).string();
}

std::string CheckpointWriter::save_shard(ShardJob job, Snapshot snapshot) {
  wait();
  int64_t bytes = 0;
  for (ShardPiece& p : job.pieces) {
    TESSERA_CHECK(snapshot == Snapshot::copy || p.data.device().is_cpu(),
                  "CheckpointWriter: a streamed snapshot reads host memory, but piece '", p.name,
                  "' is on ", p.data.device().to_string(), " (use a copy)");
    if (snapshot == Snapshot::stream) continue;
    p.data = p.data.device().is_cpu() ? ops::clone(p.data) : ops::to(p.data, Device::cpu());
    bytes += int64_t(p.data.nbytes());
  }
  if (snapshot == Snapshot::stream) {
    job.on_data_written = [this] {
      std::lock_guard<std::mutex> lock(mutex_);
      reading_ = false;
      cv_.notify_all();
    };
  }
  const std::string dir = (std::filesystem::path(checkpoints_dir(job.run_dir)) /
                           checkpoint_name(job.step)).string();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shard_job_ = std::move(job);
    job_bytes_ = last_bytes_ = bytes;
    busy_ = true;
    reading_ = snapshot == Snapshot::stream;
  }
  cv_.notify_all();
  return dir;
}

double CheckpointWriter::wait_for_snapshot() {
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return !reading_; });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void CheckpointWriter::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return !busy_; });
  if (failure_) {
    std::exception_ptr failure = failure_;
    failure_ = nullptr;
    std::rethrow_exception(failure);
  }
}

int64_t CheckpointWriter::last_snapshot_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_bytes_;
}

int64_t CheckpointWriter::pending_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return busy_ ? job_bytes_ : 0;
}

void CheckpointWriter::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [this] { return busy_ || stop_; });
    if (!busy_) return;  // stop_ with nothing in flight
    const std::string run_dir = run_dir_;
    std::optional<ShardJob> shard = std::move(shard_job_);
    shard_job_.reset();
    const int64_t keep = keep_, step = shard ? shard->step : job_.step;
    CheckpointData job = std::move(job_);
    lock.unlock();
    std::exception_ptr failure;
    try {
      if (shard)
        write_shard(*shard);
      else
        save_checkpoint(run_dir, job, keep);
    } catch (const std::exception& e) {
      failure = std::make_exception_ptr(
          Error(str_cat("the background save of step ", step, " failed: ", e.what())));
    }
    // The snapshot's memory goes back before the next save may start.
    job = CheckpointData();
    shard.reset();
    lock.lock();
    failure_ = failure;
    busy_ = false;
    reading_ = false;  // a failed write may never have reached on_data_written
    job_bytes_ = 0;
    cv_.notify_all();
  }
}

}  // namespace tessera::nn
