#pragma once
// The merge of every rank's flight recorder dump (flight_recorder.h) into verdicts a person
// can act on: what `tessera diagnose <run_dir>` prints.
//
// For each group (its key; the members' world ranks come from the dumps that hold it), the
// ranks' records are lined up by sequence number. The first call that some member has not
// completed, or whose members' records disagree, is the one the job is stuck in (or went wrong
// in), and the members' records of it say why:
//   - a member that has no record of it never joined: its newest completed call, and the call
//     it is blocked in elsewhere (or that it made no call since), say where it went;
//   - a member whose record is the group's next call (by the pattern of a step before) skipped
//     it;
//   - members whose records differ in op, reduction, dtype or bytes disagree: op or size
//     mismatch;
//   - otherwise every member joined, and the one that joined last held the others.
// Across the calls every member completed, the rank that joins last by the widest mean margin
// is named the slowest.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::parallel {

// One rank's dump, as read back.
struct FlightCall {
  uint64_t id = 0;
  int group = -1;
  int64_t seq = 0;
  std::string op, reduce, dtype, state;
  int64_t bytes = 0;
  int peer = -1;
  int64_t step = -1;
  int64_t queued_us = 0, started_us = 0, completed_us = 0;
};
struct FlightDumpGroup {
  std::string name, key;  // FlightGroup's
  int size = 1;
  int rank = 0;
};
struct FlightDump {
  int rank = 0;
  std::string host, reason, source;  // source: the file it came from
  int64_t dumped_us = 0;
  uint64_t dropped = 0;
  std::vector<FlightDumpGroup> groups;
  std::vector<FlightCall> calls;  // oldest first
};

// Validates and reads one dump; throws naming `source` and the field that is wrong.
FlightDump parse_flight_dump(const nlohmann::json& j, const std::string& source);
// Every <dir>/rank_N.json, by rank; throws when there is none or one does not parse. Given
// `unreadable`, a dump that cannot be read or is not a valid dump is left out and named there,
// with why (the merge then takes its rank as one that left no dump); it throws only when none
// is left.
std::vector<FlightDump> read_flight_dumps(const std::string& dir,
                                          std::vector<std::string>* unreadable = nullptr);

struct FlightDiagnosis {
  // One line per finding, causes first; "no hang in communication: ..." when every call
  // completed.
  std::vector<std::string> verdicts;
  // "slowest rank: ..." or "" when no group has enough completed calls to tell.
  std::string slowest;
  bool hang_found = false;
};

// world_size: the job's ranks, to name those that left no dump (0: the largest world group a
// dump holds, or the highest rank that dumped + 1).
FlightDiagnosis diagnose_flight(const std::vector<FlightDump>& dumps, int world_size = 0);

// "4.2 MB", "512 B" (decimal units, as nccl-tests print sizes).
std::string byte_text(int64_t bytes);

}  // namespace tessera::parallel
