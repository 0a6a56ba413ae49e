#include "cli/job_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "tessera/core/error.h"

namespace tessera::cli {

namespace {

namespace fs = std::filesystem;

// Every process below `root` (by parent links in /proc), deepest last.
std::vector<pid_t> descendants(pid_t root) {
  std::multimap<pid_t, pid_t> children;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t close = line.rfind(')');  // the command name may hold spaces and parentheses
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid = 0;
    if (rest >> state >> ppid) children.emplace(ppid, pid_t(std::stol(name)));
  }
  std::vector<pid_t> out{root};
  for (size_t i = 0; i < out.size(); ++i) {
    auto [lo, hi] = children.equal_range(out[i]);
    for (auto it = lo; it != hi; ++it) out.push_back(it->second);
  }
  out.erase(out.begin());
  return out;
}

}  // namespace

void kill_job(pid_t pid, const std::vector<pid_t>& ranks_here, bool reap) {
  const std::vector<pid_t> below = descendants(pid);
  ::kill(-pid, SIGKILL);
  for (pid_t p : below) ::kill(p, SIGKILL);
  for (pid_t p : ranks_here) ::kill(p, SIGKILL);
  if (reap) ::waitpid(pid, nullptr, 0);
}

StartedJob start_job(const std::vector<std::string>& command, const std::string& heartbeat_dir,
                     int attempt) {
  // The child reports a failed execvp through a close-on-exec pipe: a successful exec closes it
  // unwritten. Before, a missing program exited 127 and was restarted --max-restarts times.
  int report[2];
  TESSERA_CHECK(::pipe2(report, O_CLOEXEC) == 0,
                "tessera launch: pipe failed: ", std::strerror(errno));
  const pid_t pid = ::fork();
  TESSERA_CHECK(pid >= 0, "tessera launch: fork failed: ", std::strerror(errno));
  if (pid == 0) {
    ::close(report[0]);
    ::setpgid(0, 0);  // the job's own group: one kill reaches all of it
    for (int sig : {SIGTERM, SIGUSR1, SIGINT}) std::signal(sig, SIG_DFL);
    ::setenv("TESSERA_HEARTBEAT_DIR", heartbeat_dir.c_str(), 1);
    ::setenv("TESSERA_LAUNCH_ATTEMPT", std::to_string(attempt).c_str(), 1);
    std::vector<char*> argv;
    for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    const int err = errno;
    [[maybe_unused]] const ssize_t n = ::write(report[1], &err, sizeof err);
    std::_Exit(127);
  }
  ::close(report[1]);
  ::setpgid(pid, pid);  // also here, so the group exists before the first kill
  StartedJob job{pid, 0};
  ssize_t n;
  do n = ::read(report[0], &job.exec_errno, sizeof job.exec_errno);
  while (n < 0 && errno == EINTR);
  if (n != ssize_t(sizeof job.exec_errno)) job.exec_errno = 0;
  ::close(report[0]);
  if (job.exec_errno != 0) ::waitpid(pid, nullptr, 0);
  return job;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return str_cat("the job exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return str_cat("the job was killed by signal ", WTERMSIG(status));
  return "the job ended";
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace tessera::cli
