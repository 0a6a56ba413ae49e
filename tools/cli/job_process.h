#pragma once
// The job's processes, for the supervisor (supervisor.h): a command started in a process group
// of its own with the heartbeat environment, the whole of it killed, and how it ended.

#include <sys/types.h>

#include <string>
#include <vector>

namespace tessera::cli {

// A started job, or why its command could not be run at all.
struct StartedJob {
  pid_t pid = -1;
  int exec_errno = 0;  // execvp's errno: no such program, or not executable (then reaped)
};

// Forks and execs `command` (PATH searched) in a new process group, with
// TESSERA_HEARTBEAT_DIR and TESSERA_LAUNCH_ATTEMPT set. A failed exec is reported through a
// close-on-exec pipe, so it is told apart from a job that ran and exited 127.
StartedJob start_job(const std::vector<std::string>& command, const std::string& heartbeat_dir,
                     int attempt);

// SIGKILL to the job's process group, to every process below the launcher (by parent links in
// /proc) and to `ranks_here`, the ranks on this host (a launcher may move its ranks to groups
// of their own); then, with `reap`, waits for the launcher.
void kill_job(pid_t pid, const std::vector<pid_t>& ranks_here, bool reap);

// "the job exited with status 3", "the job was killed by signal 9"; and the shell's code for
// the same status (128 + signal).
std::string describe_status(int status);
int exit_code_of(int status);

}  // namespace tessera::cli
