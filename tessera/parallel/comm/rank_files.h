#pragma once
// The per-rank JSON files a job writes into one shared folder, <dir>/rank_N.json: the flight
// recorder's dumps (flight_watch.h), the traces (step_trace.h).

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::parallel {

struct RankFile {
  int rank = 0;
  std::string path;
  nlohmann::json json;
};

// Every <dir>/rank_N.json, by rank, each checked for nesting depth and syntax. Throws naming
// the file when one does not parse, and `what` and the folder when there is none. Given
// `unreadable`, a file that cannot be read or parsed is left out and named there, with why,
// instead; it still throws when no file is left.
std::vector<RankFile> read_rank_json_files(const std::string& dir, const std::string& what,
                                           std::vector<std::string>* unreadable = nullptr);

}  // namespace tessera::parallel
