#include "tessera/nn/io/checkpoint_writer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "tessera/core/empty.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/movement.h"
#include "tessera/nn/io/detail/checkpoint_files.h"

namespace tessera::nn {

namespace {

// A copy the writer owns, on the CPU: the training loop updates its tensors in place right
// after save().
Tensor host_copy(const Tensor& t) {
  return t.device().is_cpu() ? ops::clone(t) : ops::to(t, Device::cpu());
}

StateDict snapshot(const StateDict& dict, int64_t& bytes) {
  StateDict out;
  out.reserve(dict.size());
  for (const auto& [name, t] : dict) {
    out.emplace_back(name, host_copy(t));
    bytes += int64_t(t.nbytes());
  }
  return out;
}

// A streamed snapshot reads the tensors where they are: host memory, or a device's through
// chunked reads. Returns the host bytes it holds for them: the chunk buffer, if it reads one.
int64_t check_streamable(const Tensor& t, const std::string& name, const ChunkedReads* chunked) {
  if (t.device().is_cpu()) return 0;
  TESSERA_CHECK(chunked != nullptr, "CheckpointWriter: a streamed snapshot reads host memory, ",
                "but '", name, "' is on ", t.device().to_string(),
                " (use a copy, or set_chunked_reads)");
  TESSERA_CHECK(t.is_contiguous(), "CheckpointWriter: a streamed snapshot reads device tensors ",
                "in chunks of contiguous bytes, but '", name, "' is ", t.describe(),
                " with strides ", t.strides().to_string());
  return int64_t(chunked->buffer.nbytes());
}

// A staged snapshot of host state is copied on the writer thread, with a plain memcpy (no op:
// the training thread runs ops meanwhile): the tensors must be contiguous host memory.
int64_t check_thread_copyable(const Tensor& t, const std::string& name) {
  TESSERA_CHECK(t.device().is_cpu() && t.is_contiguous(),
                "CheckpointWriter: a staged snapshot without a land function is copied by the ",
                "writer thread from contiguous host memory, but '", name, "' is ", t.describe(),
                " with strides ", t.strides().to_string());
  return int64_t(t.nbytes());
}

Tensor thread_copy(const Tensor& t) {
  Tensor out = empty(t.shape(), t.dtype(), Device::cpu());
  if (t.nbytes() > 0)
    std::memcpy(out.data_ptr("checkpoint snapshot"), t.data_ptr("checkpoint snapshot"), t.nbytes());
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

void CheckpointWriter::submit(int64_t step, Task task, int64_t bytes, Snapshot snapshot,
                              std::function<void()> land) {
  // The live state is read on the thread by a stream, and by a staged snapshot that the
  // thread copies itself (no land); a staged one with land is in buffers the caller fills.
  const bool thread_reads = snapshot == Snapshot::stream || (snapshot == Snapshot::staged && !land);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    step_ = step;
    task_ = std::move(task);
    job_bytes_ = last_bytes_ = bytes;
    busy_ = true;
    reading_ = thread_reads;
    landed_ = snapshot != Snapshot::staged || !land;
    land_ = std::move(land);
    land_failure_ = nullptr;
  }
  cv_.notify_all();
}

void CheckpointWriter::land() {
  std::function<void()> f;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (landed_) return;
    f = std::move(land_);
    land_ = nullptr;
  }
  std::exception_ptr failure;
  try {
    f();
  } catch (const std::exception&) {
    failure = std::current_exception();  // the thread then writes nothing and reports it
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    land_failure_ = failure;
    landed_ = true;
  }
  cv_.notify_all();
}

std::string CheckpointWriter::save(const std::string& run_dir, const CheckpointData& data,
                                   int64_t keep) {
  wait();
  auto copy = std::make_shared<CheckpointData>();
  int64_t bytes = 0;
  copy->step = data.step;
  copy->model = snapshot(data.model, bytes);
  copy->optimizer = snapshot(data.optimizer, bytes);
  copy->state = data.state;
  submit(data.step, [run_dir, copy, keep](const auto&) { save_checkpoint(run_dir, *copy, keep); },
         bytes, Snapshot::copy, {});
  return checkpoint_path(run_dir, data.step);
}

std::string CheckpointWriter::save_shard(ShardJob job, Snapshot snapshot,
                                         std::function<void()> land, int64_t staged_bytes) {
  wait();
  const bool thread_copies = snapshot == Snapshot::staged && !land;
  int64_t bytes = snapshot == Snapshot::staged ? staged_bytes : 0;
  for (ShardPiece& p : job.pieces) {
    if (snapshot == Snapshot::stream) {
      bytes = std::max(bytes, check_streamable(p.data, p.name, chunked_.get()));
    } else if (thread_copies) {
      bytes += check_thread_copyable(p.data, p.name);
    } else if (snapshot == Snapshot::staged) {
      check_streamable(p.data, p.name, nullptr);
    } else {
      p.data = host_copy(p.data);
      bytes += int64_t(p.data.nbytes());
    }
  }
  const std::string dir = checkpoint_path(job.run_dir, job.step);
  const int64_t step = job.step;
  if (snapshot == Snapshot::stream) job.chunked = chunked_;
  auto shared = std::make_shared<ShardJob>(std::move(job));
  submit(
      step,
      [shared, thread_copies](const std::function<void()>& release) {
        if (thread_copies) {
          for (ShardPiece& p : shared->pieces) p.data = thread_copy(p.data);
          release();  // the loop's next update may run
        } else {
          shared->on_data_written = release;
        }
        write_shard(*shared);
      },
      bytes, snapshot, std::move(land));
  return dir;
}

std::string CheckpointWriter::save_local(const std::string& rank_dir, int64_t step,
                                         StateDict tensors, const nlohmann::json& fingerprint,
                                         const nlohmann::json& state, Snapshot snapshot,
                                         std::function<void()> land, int64_t staged_bytes) {
  wait();
  const bool thread_copies = snapshot == Snapshot::staged && !land;
  int64_t bytes = snapshot == Snapshot::staged ? staged_bytes : 0;
  std::shared_ptr<const ChunkedReads> chunked;
  if (snapshot == Snapshot::stream) {
    chunked = chunked_;
    for (const auto& [name, t] : tensors)
      bytes = std::max(bytes, check_streamable(t, name, chunked.get()));
  } else if (thread_copies) {
    for (const auto& [name, t] : tensors) bytes += check_thread_copyable(t, name);
  } else if (snapshot == Snapshot::staged) {
    for (const auto& [name, t] : tensors) check_streamable(t, name, nullptr);
  } else {
    tensors = nn::snapshot(tensors, bytes);
  }
  auto shared = std::make_shared<StateDict>(std::move(tensors));
  submit(
      step,
      [rank_dir, step, shared, fingerprint, state, chunked,
       thread_copies](const std::function<void()>& release) {
        if (thread_copies) {
          for (auto& [name, t] : *shared) t = thread_copy(t);
          release();
        }
        save_local_checkpoint(rank_dir, step, *shared, fingerprint, state,
                              thread_copies ? nullptr : release, chunked.get());
      },
      bytes, snapshot, std::move(land));
  return (std::filesystem::path(rank_dir) / checkpoint_name(step)).string();
}

void CheckpointWriter::set_chunked_reads(std::shared_ptr<const ChunkedReads> chunked) {
  TESSERA_CHECK(!chunked || (chunked->buffer.defined() && chunked->buffer.device().is_cpu() &&
                             chunked->buffer.nbytes() > 0 && chunked->read),
                "CheckpointWriter::set_chunked_reads: a host buffer and a read function, please");
  chunked_ = std::move(chunked);
}

double CheckpointWriter::wait_for_snapshot() {
  const auto start = std::chrono::steady_clock::now();
  land();
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [this] { return !reading_; });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void CheckpointWriter::wait() {
  land();
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
    cv_.wait(lock, [this] { return landed_; });  // a staged snapshot's copies are in
    Task task = std::move(task_);
    task_ = nullptr;
    const int64_t step = step_;
    const std::exception_ptr land_failure = land_failure_;
    lock.unlock();
    const std::function<void()> release = [this] {
      std::lock_guard<std::mutex> guard(mutex_);
      reading_ = false;
      cv_.notify_all();
    };
    std::exception_ptr failure;
    try {
      if (land_failure) std::rethrow_exception(land_failure);
      task(release);
    } catch (const std::exception& e) {
      failure = std::make_exception_ptr(
          Error(str_cat("the background save of step ", step, " failed: ", e.what())));
    }
    task = nullptr;  // the snapshot's memory goes back before the next save may start
    lock.lock();
    failure_ = failure;
    busy_ = false;
    reading_ = false;  // a failed write may never have released its snapshot
    job_bytes_ = 0;
    cv_.notify_all();
  }
}

}  // namespace tessera::nn
