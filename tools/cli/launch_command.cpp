// `tessera launch [flags] -- <job command>`: runs a training job under the supervisor
// (cli/supervisor.h), restarting it after a lost or stuck rank. For example
//   tessera launch --max-restarts 5 -- mpiexec -n 4 tessera train --dp 4 --run-dir runs/a
//   tessera launch --heartbeat-timeout 900 -- srun tessera train --config big.json

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/supervisor.h"
#include "tessera/core/error.h"

namespace tessera::cli {

void add_launch_command(CLI::App& app) {
  auto o = std::make_shared<LaunchOptions>();
  CLI::App* cmd = app.add_subcommand(
      "launch", "Run a training job and restart it after a lost or stuck rank (-- COMMAND)");
  cmd->add_option("--max-restarts", o->max_restarts, "restarts before giving up (default 3)");
  cmd->add_option("--heartbeat-timeout", o->heartbeat_timeout,
                  "seconds a rank may go without a heartbeat before the job counts as stuck; "
                  "must exceed the job's --comm-timeout (default 900)");
  cmd->add_option("--dump-window", o->dump_window,
                  "seconds between asking a stuck job's ranks for diagnostics (SIGUSR2) and "
                  "killing it (default 30)");
  cmd->add_option("--run-dir", o->run_dir,
                  "the job's run directory (default: the command's --run-dir or config)");
  CLI::Option* ranks =
      cmd->add_option("--ranks", o->ranks,
                      "ranks that send heartbeats (default: --dp * --tp * --pp of the command)");
  cmd->add_option("command", o->command, "the job: a launcher (mpiexec, srun) or tessera train")
      ->required();
  cmd->callback([o, ranks] {
    // 0 is the options' "from the command"; given, it is a size no job has.
    TESSERA_CHECK(ranks->count() == 0 || o->ranks >= 1, "tessera launch: --ranks must be in [1, ",
                  kMaxLaunchRanks, "], got ", o->ranks);
    exit_code() = supervise(*o, std::cout);
  });
}

}  // namespace tessera::cli
