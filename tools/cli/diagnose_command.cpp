// `tessera diagnose RUN_DIR`: merges the flight recorder dumps every rank wrote into
// RUN_DIR/flight (on a failed call, a peer's request or SIGUSR2: parallel/comm/flight_watch.h)
// and prints what the job was stuck in and why (parallel/comm/flight_diagnosis.h):
//
//   $ tessera diagnose runs/dp2
//   flight dumps: 2 ranks in runs/dp2/flight (rank 0: this rank's call failed: collective timed out
//   ...) group dp[1,3] all_reduce #5 (4.2 MB f32, step 3): rank 1 never joined; ... slowest rank:
//   rank 1 joined its collectives 0.412 s after the first rank on average ...
//
// Exit status 0 when the dumps show no hang or mismatch, 3 when they do (so a script can tell),
// 1 when no dump can be read. A dump that cannot be read is named and skipped.

#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "tessera/core/error.h"
#include "tessera/parallel/comm/flight_diagnosis.h"

namespace tessera::cli {

namespace {

struct DiagnoseFlags {
  std::string run_dir;
  int world_size = 0;
  CLI::Option* world_size_option = nullptr;
};

int run_diagnose(const DiagnoseFlags& f) {
  namespace fs = std::filesystem;
  // 0 is the library's "from the dumps"; given, it is a world no job has.
  TESSERA_CHECK(f.world_size_option->count() == 0 || f.world_size >= 1,
                "diagnose: --world-size must be at least 1 (leave it out for the world group's ",
                "size in the dumps), got ", f.world_size);
  // A run directory holds flight/; a folder of dumps may be named directly.
  const std::string dir = fs::is_directory(f.run_dir + "/flight") ? f.run_dir + "/flight" : f.run_dir;
  // Mid-incident, a damaged dump should not hide the others: it is named and its rank is taken
  // as one that left none.
  std::vector<std::string> unreadable;
  const std::vector<parallel::FlightDump> dumps = parallel::read_flight_dumps(dir, &unreadable);
  std::cout << "flight dumps: " << dumps.size() << " rank" << (dumps.size() == 1 ? "" : "s")
            << " in " << dir << "\n";
  for (const std::string& why : unreadable)
    std::cout << "  skipped, taken as no dump: " << why << "\n";
  for (const parallel::FlightDump& d : dumps)
    std::cout << "  rank " << d.rank << " (" << d.host << "): " << d.calls.size() << " calls"
              << (d.dropped ? str_cat(" (", d.dropped, " older ones overwritten)") : "") << "; "
              << d.reason << "\n";
  const parallel::FlightDiagnosis diagnosis = parallel::diagnose_flight(dumps, f.world_size);
  for (const std::string& v : diagnosis.verdicts) std::cout << v << "\n";
  if (!diagnosis.slowest.empty()) std::cout << diagnosis.slowest << "\n";
  return diagnosis.hang_found ? 3 : 0;
}

}  // namespace

void add_diagnose_command(CLI::App& app) {
  auto f = std::make_shared<DiagnoseFlags>();
  CLI::App* cmd = app.add_subcommand(
      "diagnose", "Merge the ranks' flight recorder dumps of a run and say where it hung and why");
  cmd->add_option("run_dir", f->run_dir, "the run directory (or its flight/ folder)")->required();
  f->world_size_option =
      cmd->add_option("--world-size", f->world_size,
                      "the job's ranks, to name those that left no dump (default: the world "
                      "group's size in the dumps)");
  cmd->callback([f] { exit_code() = run_diagnose(*f); });
}

}  // namespace tessera::cli
