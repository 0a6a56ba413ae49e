#pragma once
// FlightRecorder: the last communicator calls of one rank, in a fixed-size ring, for the
// post-mortem of a job that hung or failed (`tessera diagnose`, flight_diagnosis.h).
//
// Every call of a group is one record: the group, a per-group sequence number, the op, its
// bytes and dtype, the peer or root, the training step, and three wall-clock times as its
// state moves queued (issued) -> started (this rank blocked on it) -> completed (or failed).
// Ranks issue a group's collectives in the same order, so record #57 of group dp is the same
// collective on every member: the merge lines the ranks' rings up by (group, seq). Transfers
// are numbered per (group, peer, direction), so send #k to rank 1 is recv #k from rank 0 on
// rank 1. The clock is the system's (microseconds since the Unix epoch): ranks on one host
// share it, and NTP keeps hosts within a millisecond or so, far below a hang's seconds.
//
// Cost: a record is written under an uncontended mutex, with no allocation (the ring is
// allocated once); bench/bench_flight_recorder.cpp measures it. A dump copies the ring under
// the mutex and serialises outside it, so a watcher thread may dump while the rank is stuck
// inside a call.

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::parallel {

// The version of the dump format (docs/formats.md).
inline constexpr int64_t kFlightVersion = 1;

enum class FlightState : uint8_t { queued, started, completed, failed };
const char* flight_state_name(FlightState state);

struct FlightRecord {
  uint64_t id = 0;     // this rank's call number, every group together (1-based)
  int group = -1;      // index into the recorder's groups
  int64_t seq = 0;     // per group (collectives) or per (group, peer, direction) (transfers)
  const char* op = ""; // "all_reduce", ..., "send", "recv", "barrier" (static strings)
  const char* reduce = "";  // "sum", "max", "avg" for reductions, else ""
  int64_t bytes = 0;
  const char* dtype = "";   // dtype_name(), "" for a barrier
  int peer = -1;        // send/recv: the peer's rank in the group; broadcast: the root
  FlightState state = FlightState::queued;
  int64_t step = -1;
  int64_t queued_us = 0, started_us = 0, completed_us = 0;  // 0: not reached
};

// A group as the recorder knows it. The key names the group instance the same way on every
// member, without a collective: the world's name, then "/<name>:<color>" per split, so that the
// two dp groups of a dp2 x tp2 layout differ ("world/dp:0", "world/dp:1") while both members
// of one agree. The merge orders a key's dumps by `rank` to learn its members' world ranks.
struct FlightGroup {
  std::string name;
  std::string key;
  int size = 1;
  int rank = 0;  // this rank's place in the group
};

class FlightRecorder {
 public:
  // world_rank -1: set later, by the world group's first call (set_world_rank).
  explicit FlightRecorder(int world_rank = -1, size_t capacity = kDefaultCapacity);
  static constexpr size_t kDefaultCapacity = 4096;

  int world_rank() const;
  void set_world_rank(int rank);
  size_t capacity() const { return ring_.size(); }

  // A group this rank belongs to; returns its index for record().
  int add_group(FlightGroup group);
  // A new call, queued; returns its id for mark(). peer: see FlightRecord.
  uint64_t record(int group, const char* op, const char* reduce, int64_t bytes,
                  const char* dtype, int peer, int64_t step);
  // Moves call `id` to `state` (now), unless the ring has overwritten it since.
  void mark(uint64_t id, FlightState state);

  // The records still in the ring, oldest first, and the groups.
  std::vector<FlightRecord> records() const;
  std::vector<FlightGroup> groups() const;
  // The calls the ring has overwritten.
  uint64_t dropped() const;

  // The dump: {"format": "tessera-flight", "version", "rank", "host", "pid", "reason",
  // "dumped_us", "dropped", "groups", "records"} (docs/formats.md).
  nlohmann::json to_json(const std::string& reason) const;
  // Writes to_json(reason) to path atomically; throws naming the path on failure.
  void dump(const std::string& path, const std::string& reason) const;

  // Marks call `id` failed (a timeout or a transport error, `reason` its message) and, on the
  // first failure of this rank, runs the failure hook: FlightWatch's dump and request.
  void fail(uint64_t id, const std::string& reason);
  void set_on_failure(std::function<void(const std::string& reason)> hook);
  // Whether fail() has been called.
  bool failed() const;

 private:
  mutable std::mutex mutex_;
  int world_rank_;
  std::vector<FlightRecord> ring_;
  uint64_t next_id_ = 1;
  std::vector<FlightGroup> groups_;
  // The next sequence number of each group's collectives, and of its transfers per peer and
  // direction (transfer_seq_[group][2 * peer + (recv ? 1 : 0)]).
  std::vector<int64_t> collective_seq_;
  std::vector<std::vector<int64_t>> transfer_seq_;
  std::function<void(const std::string&)> on_failure_;
  bool failed_ = false;
};

// Microseconds since the Unix epoch.
int64_t flight_clock_us();

}  // namespace tessera::parallel
