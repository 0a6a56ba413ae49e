#include "tessera/parallel/comm/flight_watch.h"

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"

namespace tessera::parallel {

namespace {

// Bumped by SIGUSR2's handler; a lock-free atomic is safe to touch from one.
std::atomic<uint64_t> g_signal_requests{0};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

int64_t mtime_ns(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// A file's time comes from the kernel's coarse clock, which may trail the system clock by a
// tick (up to 10 ms at HZ=100): a dump written just after a request may carry an earlier time.
constexpr int64_t kClockSlackUs = 50'000;

}  // namespace

void FlightWatch::request_from_signal() {
  g_signal_requests.fetch_add(1, std::memory_order_relaxed);
}

FlightWatch::FlightWatch(Communicator& world, std::string dir, double poll_seconds)
    : recorder_(world.flight_recorder()),
      dir_(std::move(dir)),
      rank_(world.rank()),
      world_size_(world.size()),
      poll_seconds_(poll_seconds) {
  TESSERA_CHECK(poll_seconds_ > 0, "flight watch: the poll interval must be positive");
  if (recorder_->world_rank() < 0) recorder_->set_world_rank(rank_);
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  TESSERA_CHECK(!ec, "flight recorder: cannot create ", dir_, ": ", ec.message());
  seen_mtime_ns_ = mtime_ns(dir_ + "/request");
  seen_request_ = read_request(nullptr);
  seen_signals_ = g_signal_requests.load();
  recorder_->set_on_failure(
      [this](const std::string& reason) { dump_and_request("this rank's call failed: " + reason); });
  thread_ = std::thread([this] { watch(); });
}

FlightWatch::~FlightWatch() {
  recorder_->set_on_failure(nullptr);
  stop_.store(true);
  thread_.join();
}

std::string FlightWatch::dump_path(int rank) const {
  return dir_ + "/rank_" + std::to_string(rank) + ".json";
}

void FlightWatch::dump(const std::string& reason) {
  std::lock_guard lock(dump_mutex_);
  try {
    recorder_->dump(dump_path(rank_), reason);
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank_ << ": flight recorder dump failed: " << e.what() << "\n";
  }
}

bool FlightWatch::raise_answered(int64_t id) {
  int64_t prev = answered_.load();
  while (prev < id)
    if (answered_.compare_exchange_weak(prev, id)) return true;
  return false;
}

void FlightWatch::dump_and_request(const std::string& reason) {
  const int64_t id = flight_clock_us();
  raise_answered(id);
  dump(reason);
  const nlohmann::json request = {{"id", id}, {"rank", rank_}, {"reason", reason}};
  try {
    write_file_atomic(dir_ + "/request", request.dump() + "\n");
  } catch (const std::exception& e) {
    std::cerr << "rank " << rank_ << ": flight recorder request failed: " << e.what() << "\n";
  }
}

int64_t FlightWatch::read_request(std::string* what) const {
  const std::string path = dir_ + "/request";
  if (mtime_ns(path) == 0) return 0;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_text_file(path), nullptr, false);
    if (j.is_discarded() || !j.contains("id") || !j["id"].is_number_integer()) return 0;
    if (what != nullptr && j.contains("rank") && j.contains("reason") && j["reason"].is_string())
      *what = str_cat("rank ", j["rank"].dump(), " asked: ", j["reason"].get<std::string>());
    return j["id"].get<int64_t>();
  } catch (const std::exception&) {
    return 0;  // replaced while read: the next poll reads the new one
  }
}

void FlightWatch::watch() {
  const auto poll = std::chrono::duration<double>(poll_seconds_);
  while (!stop_.load()) {
    std::this_thread::sleep_for(poll);
    if (const uint64_t s = g_signal_requests.load(); s != seen_signals_) {
      seen_signals_ = s;
      raise_answered(flight_clock_us());
      dump("SIGUSR2");
    }
    const int64_t mtime = mtime_ns(dir_ + "/request");
    if (mtime == 0 || mtime == seen_mtime_ns_) continue;
    seen_mtime_ns_ = mtime;
    std::string what;
    const int64_t id = read_request(&what);
    if (id <= seen_request_) continue;
    seen_request_ = id;
    if (raise_answered(id)) dump("request: " + what);  // else this rank wrote it, or dumped since
  }
}

std::vector<int> FlightWatch::wait_for_dumps(double seconds) const {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(seconds, 0.0));
  for (;;) {
    const int64_t since_us = answered_.load() - kClockSlackUs;
    std::vector<int> missing;
    for (int r = 0; r < world_size_; ++r)
      if (mtime_ns(dump_path(r)) / 1000 < since_us) missing.push_back(r);
    if (missing.empty() || std::chrono::steady_clock::now() >= deadline) return missing;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace tessera::parallel
