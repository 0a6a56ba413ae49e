#include "tessera/parallel/comm/flight_recorder.h"

#include <unistd.h>

#include <chrono>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"

namespace tessera::parallel {

const char* flight_state_name(FlightState state) {
  switch (state) {
    case FlightState::queued:
      return "queued";
    case FlightState::started:
      return "started";
    case FlightState::completed:
      return "completed";
    case FlightState::failed:
      return "failed";
  }
  return "?";
}

int64_t flight_clock_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

FlightRecorder::FlightRecorder(int world_rank, size_t capacity)
    : world_rank_(world_rank), ring_(capacity) {
  TESSERA_CHECK(capacity > 0, "flight recorder: the ring needs at least one record");
}

int FlightRecorder::world_rank() const {
  std::lock_guard lock(mutex_);
  return world_rank_;
}

void FlightRecorder::set_world_rank(int rank) {
  std::lock_guard lock(mutex_);
  world_rank_ = rank;
}

int FlightRecorder::add_group(FlightGroup group) {
  TESSERA_CHECK(group.size >= 1 && group.rank >= 0 && group.rank < group.size,
                "flight recorder: rank ", group.rank, " is outside group ", group.key, " of ",
                group.size);
  std::lock_guard lock(mutex_);
  const size_t size = size_t(group.size);
  groups_.push_back(std::move(group));
  collective_seq_.push_back(1);
  transfer_seq_.emplace_back(2 * size, 1);
  return int(groups_.size()) - 1;
}

uint64_t FlightRecorder::record(int group, const char* op, const char* reduce, int64_t bytes,
                                const char* dtype, int peer, int64_t step) {
  const int64_t now = flight_clock_us();
  const bool send = std::strcmp(op, "send") == 0, recv = std::strcmp(op, "recv") == 0;
  std::lock_guard lock(mutex_);
  TESSERA_CHECK(group >= 0 && group < int(groups_.size()), "flight recorder: no group ", group);
  int64_t& counter = (send || recv) ? transfer_seq_[group].at(2 * size_t(peer) + (recv ? 1 : 0))
                                    : collective_seq_[group];
  const uint64_t id = next_id_++;
  FlightRecord& r = ring_[id % ring_.size()];
  r = FlightRecord{};
  r.id = id;
  r.group = group;
  r.seq = counter++;
  r.op = op;
  r.reduce = reduce;
  r.bytes = bytes;
  r.dtype = dtype;
  r.peer = peer;
  r.step = step;
  r.queued_us = now;
  return id;
}

void FlightRecorder::mark(uint64_t id, FlightState state) {
  const int64_t now = flight_clock_us();
  std::lock_guard lock(mutex_);
  FlightRecord& r = ring_[id % ring_.size()];
  if (r.id != id || r.state == FlightState::completed || r.state == FlightState::failed) return;
  if (state == FlightState::started) {
    if (r.state == FlightState::queued) {
      r.state = state;
      r.started_us = now;
    }
    return;
  }
  if (r.started_us == 0) r.started_us = now;  // completed without a wait (test() saw it done)
  r.state = state;
  r.completed_us = now;
}

std::vector<FlightRecord> FlightRecorder::records() const {
  std::lock_guard lock(mutex_);
  std::vector<FlightRecord> out;
  const uint64_t n = next_id_ - 1;
  const uint64_t first = n > ring_.size() ? n - ring_.size() + 1 : 1;
  out.reserve(size_t(n - first + 1));
  for (uint64_t id = first; id <= n; ++id) out.push_back(ring_[id % ring_.size()]);
  return out;
}

std::vector<FlightGroup> FlightRecorder::groups() const {
  std::lock_guard lock(mutex_);
  return groups_;
}

uint64_t FlightRecorder::dropped() const {
  std::lock_guard lock(mutex_);
  const uint64_t n = next_id_ - 1;
  return n > ring_.size() ? n - ring_.size() : 0;
}

nlohmann::json FlightRecorder::to_json(const std::string& reason) const {
  const std::vector<FlightRecord> rs = records();  // copies under the lock
  const std::vector<FlightGroup> gs = groups();
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  nlohmann::json groups = nlohmann::json::array();
  for (const FlightGroup& g : gs)
    groups.push_back({{"name", g.name}, {"key", g.key}, {"size", g.size}, {"rank", g.rank}});
  nlohmann::json records = nlohmann::json::array();
  for (const FlightRecord& r : rs) {
    nlohmann::json j = {{"id", r.id},
                        {"group", r.group},
                        {"seq", r.seq},
                        {"op", r.op},
                        {"bytes", r.bytes},
                        {"dtype", r.dtype},
                        {"state", flight_state_name(r.state)},
                        {"step", r.step},
                        {"queued_us", r.queued_us},
                        {"started_us", r.started_us},
                        {"completed_us", r.completed_us}};
    if (*r.reduce != '\0') j["reduce"] = r.reduce;
    if (r.peer >= 0) j["peer"] = r.peer;
    records.push_back(std::move(j));
  }
  return {{"format", "tessera-flight"},
          {"version", kFlightVersion},
          {"rank", world_rank()},
          {"host", host},
          {"pid", int64_t(getpid())},
          {"reason", reason},
          {"dumped_us", flight_clock_us()},
          {"capacity", ring_.size()},
          {"dropped", dropped()},
          {"groups", groups},
          {"records", records}};
}

void FlightRecorder::fail(uint64_t id, const std::string& reason) {
  mark(id, FlightState::failed);
  std::function<void(const std::string&)> hook;
  {
    std::lock_guard lock(mutex_);
    if (failed_) return;
    failed_ = true;
    hook = on_failure_;
  }
  if (hook) hook(reason);  // outside the lock: it dumps this ring
}

bool FlightRecorder::failed() const {
  std::lock_guard lock(mutex_);
  return failed_;
}

void FlightRecorder::set_on_failure(std::function<void(const std::string& reason)> hook) {
  std::lock_guard lock(mutex_);
  on_failure_ = std::move(hook);
}

void FlightRecorder::dump(const std::string& path, const std::string& reason) const {
  // One record per line: a dump holds thousands, and a person reads it with grep and less.
  nlohmann::json j = to_json(reason);
  const nlohmann::json records = std::move(j["records"]);
  j.erase("records");
  std::string text = j.dump();
  text.pop_back();  // the closing brace
  text += ",\"records\":[";
  for (size_t i = 0; i < records.size(); ++i) text += (i ? ",\n" : "\n") + records[i].dump();
  text += "\n]}\n";
  write_file_atomic(path, text);
}

}  // namespace tessera::parallel
