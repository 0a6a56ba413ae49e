#include "cli/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/exit_status.h"
#include "cli/job_process.h"
#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/train/heartbeat.h"

namespace tessera::cli {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string command_flag(const std::vector<std::string>& command, const std::string& flag) {
  for (size_t i = 0; i < command.size(); ++i) {
    if (command[i] == flag && i + 1 < command.size()) return command[i + 1];
    if (command[i].starts_with(flag + "=")) return command[i].substr(flag.size() + 1);
  }
  return "";
}

namespace {

volatile sig_atomic_t g_stop_signal = 0;
void on_stop_signal(int sig) { g_stop_signal = sig; }

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string this_host() {
  char host[256] = {};
  return ::gethostname(host, sizeof host - 1) == 0 ? std::string(host) : std::string("?");
}

// A setting of the job: its flag, else its --config file's key, else `fallback`.
std::string job_setting(const std::vector<std::string>& command, const std::string& key,
                        const std::string& fallback) {
  std::string flag = "--" + key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  if (std::string v = command_flag(command, flag); !v.empty()) return v;
  if (std::string config = command_flag(command, "--config"); !config.empty()) {
    std::ifstream in(config);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_object() && j.contains(key)) {
      const auto& v = j[key];
      return v.is_string() ? v.get<std::string>() : v.dump();
    }
  }
  return fallback;
}

double parse_number(const std::string& text, const std::string& what) {
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  detail::throw_error("tessera launch: ", what, " is '", text, "', not a number");
}

// What the supervisor last read from one rank's heartbeat file.
struct Beat {
  std::string text;  // the file as last read ("" before the first beat)
  Clock::time_point changed;
  std::string phase, host;
  int64_t step = -1, start_step = -1, pid = 0;
  double allow = 0;
  int status = -1;  // the "exit" beat's
};

void read_beat(const std::string& path, Beat& b) {
  std::ifstream in(path);
  if (!in) return;
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.empty() || text == b.text) return;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return;  // renamed files are whole; anything else is not a beat
  b.text = std::move(text);
  b.changed = Clock::now();
  b.phase = j.value("phase", "");
  b.host = j.value("host", "?");
  b.step = j.value("step", int64_t(-1));
  b.start_step = j.value("start_step", int64_t(-1));
  b.pid = j.value("pid", int64_t(0));
  b.allow = j.value("allow_s", 0.0);
  b.status = j.value("status", -1);
}

// The pids of the ranks on this host, from their last beats: a launcher may move its ranks to
// process groups of their own, out of reach of a kill of the job's group.
std::vector<pid_t> ranks_on_this_host(const std::vector<Beat>& beats) {
  const std::string host = this_host();
  std::vector<pid_t> pids;
  for (const Beat& b : beats)
    if (b.pid > 0 && b.host == host) pids.push_back(pid_t(b.pid));
  return pids;
}

// Whether the command runs `tessera train` itself (directly or under a launcher), so that its
// flags, or their defaults, are the job's; a script that runs it hides them.
bool runs_tessera_train(const std::vector<std::string>& command) {
  for (size_t i = 0; i + 1 < command.size(); ++i)
    if (fs::path(command[i]).filename() == "tessera" && command[i + 1] == "train") return true;
  return false;
}

// The restarts so far, rewritten whole (and atomically) at each change.
class RestartLog {
 public:
  explicit RestartLog(std::string path) : path_(std::move(path)) {}
  nlohmann::json& add(nlohmann::json record) {
    records_.push_back(std::move(record));
    return records_.back();
  }
  nlohmann::json* last() { return records_.empty() ? nullptr : &records_.back(); }
  void write() const {
    std::string text;
    for (const auto& r : records_) text += r.dump() + "\n";
    write_file_atomic(path_, text);
  }

 private:
  std::string path_;
  std::vector<nlohmann::json> records_;
};

}  // namespace

int supervise(LaunchOptions o, std::ostream& out) {
  TESSERA_CHECK(!o.command.empty(), "tessera launch: no command to run (tessera launch [flags] "
                                    "-- mpiexec -n 4 tessera train ...)");
  TESSERA_CHECK(o.max_restarts >= 0, "tessera launch: --max-restarts must be >= 0, got ",
                o.max_restarts);
  TESSERA_CHECK(o.heartbeat_timeout > 0 && std::isfinite(o.heartbeat_timeout),
                "tessera launch: --heartbeat-timeout must be a positive number of seconds, got ",
                o.heartbeat_timeout);
  // The bound train's --dump-window has: past an hour a stuck job is not worth its GPUs.
  TESSERA_CHECK(o.dump_window >= 0 && o.dump_window <= 3600,
                "tessera launch: --dump-window must be between 0 and 3600 seconds, got ",
                o.dump_window);
  // The job's run directory: its flag or config key; else train's default when the command
  // runs tessera train itself; else (a script) only what --run-dir says.
  const bool direct = runs_tessera_train(o.command);
  const std::string job_run_dir = job_setting(o.command, "run_dir", direct ? "runs/default" : "");
  TESSERA_CHECK(
      o.run_dir.empty() || job_run_dir.empty() || fs::path(o.run_dir) == fs::path(job_run_dir),
      "tessera launch: --run-dir ", o.run_dir, " differs from the job's ", job_run_dir);
  const bool assumed_run_dir = o.run_dir.empty() && job_run_dir.empty();
  const bool assumed_ranks = o.ranks == 0 && !direct;
  if (o.run_dir.empty()) o.run_dir = job_run_dir.empty() ? "runs/default" : job_run_dir;
  if (o.ranks == 0) {
    double ranks = 1;
    for (const char* axis : {"dp", "tp", "pp"})
      ranks *= parse_number(job_setting(o.command, axis, "1"), str_cat("the job's --", axis));
    TESSERA_CHECK(ranks >= 1 && ranks <= kMaxLaunchRanks, "tessera launch: the job's --dp x ",
                  "--tp x --pp is ", ranks, "; one supervisor watches 1 to ", kMaxLaunchRanks,
                  " ranks");
    o.ranks = int(ranks);
  }
  TESSERA_CHECK(o.ranks >= 1 && o.ranks <= kMaxLaunchRanks, "tessera launch: --ranks must be in ",
                "[1, ", kMaxLaunchRanks, "], got ", o.ranks);
  // One process has no collectives (and train refuses --comm-timeout there): no order to keep.
  if (o.ranks > 1) {
    const double comm_timeout =
        parse_number(job_setting(o.command, "comm_timeout", "600"), "the job's --comm-timeout");
    TESSERA_CHECK(comm_timeout < o.heartbeat_timeout, "tessera launch: --heartbeat-timeout ",
                  o.heartbeat_timeout, " s must exceed the job's collective timeout (",
                  comm_timeout, " s, --comm-timeout): a hung peer ends the job through its ",
                  "collective timeout first (docs/resilience.md)");
  }

  const std::string heartbeat_dir = (fs::path(o.run_dir) / "heartbeat").string();
  fs::create_directories(o.run_dir);
  // One supervisor per run directory: a second would read the first one's heartbeats (and kill
  // its ranks), and two jobs would write one set of checkpoints.
  const std::string lock_path = (fs::path(o.run_dir) / "launch.lock").string();
  const int lock = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TESSERA_CHECK(lock >= 0, "tessera launch: cannot open ", lock_path, ": ", std::strerror(errno));
  if (::flock(lock, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock);
    detail::throw_error("tessera launch: another tessera launch supervises ", o.run_dir,
                        " (it holds ", lock_path, ")");
  }
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }
  } unlock{lock};
  RestartLog log((fs::path(o.run_dir) / "restarts.jsonl").string());

  struct sigaction action {}, previous[3];
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  const int stop_signals[3] = {SIGTERM, SIGUSR1, SIGINT};
  for (int i = 0; i < 3; ++i) sigaction(stop_signals[i], &action, &previous[i]);
  g_stop_signal = 0;
  struct Restore {
    struct sigaction* previous;
    const int* signals;
    ~Restore() {
      for (int i = 0; i < 3; ++i) sigaction(signals[i], &previous[i], nullptr);
    }
  } restore{previous, stop_signals};

  // A script hides the job's flags: say what is assumed, rather than watch it in silence.
  if (assumed_run_dir || assumed_ranks) {
    const std::string dir = assumed_run_dir ? "its run directory " + o.run_dir : "";
    const std::string ranks =
        assumed_ranks ? str_cat(o.ranks, " rank", o.ranks > 1 ? "s" : "") : "";
    const char* both = assumed_run_dir && assumed_ranks ? " and " : "";
    out << "tessera launch: the job does not run tessera train itself; assuming " << dir << both
        << ranks << " (give " << (assumed_run_dir ? "--run-dir" : "") << both
        << (assumed_ranks ? "--ranks" : "") << " to say otherwise)\n";
  }

  int64_t step_reached = -1;
  std::string last_cause;
  int last_code = 1;
  int unstarted_code = -1;  // the status of the last attempt if it ended before any rank beat
  Clock::time_point failed_at;
  for (int attempt = 0;; ++attempt) {
    std::error_code ec;
    fs::remove_all(heartbeat_dir, ec);
    fs::create_directories(heartbeat_dir, ec);
    out << "tessera launch: attempt " << attempt + 1 << " of " << o.max_restarts + 1 << ", "
        << o.ranks << " rank" << (o.ranks > 1 ? "s" : "") << ", heartbeat timeout "
        << o.heartbeat_timeout << " s\n"
        << std::flush;
    const StartedJob job = start_job(o.command, heartbeat_dir, attempt);
    if (job.exec_errno != 0) {
      // The same on every try: not worth a restart.
      out << "tessera launch: cannot run " << o.command[0] << ": " << std::strerror(job.exec_errno)
          << "; not restarting\n";
      return 127;
    }
    const pid_t pid = job.pid;
    const Clock::time_point started = Clock::now();
    std::vector<Beat> beats(size_t(o.ranks));
    int forwarded = 0;
    std::string cause;
    int status = 0;
    bool exited = false, cannot_start = false;
    auto refresh = [&] {
      for (int r = 0; r < o.ranks; ++r)
        read_beat(train::heartbeat_path(heartbeat_dir, r), beats[size_t(r)]);
      for (const Beat& b : beats)
        if (!b.phase.empty() && b.phase != "setup") step_reached = std::max(step_reached, b.step);
    };
    // The restart before this attempt has recovered once rank 0 finished a step: how long
    // since the failure, and how many steps it lost.
    auto note_recovery = [&] {
      nlohmann::json* pending = log.last();
      const Beat& b = beats[0];
      if (pending == nullptr || pending->contains("seconds_to_recover") || b.phase.empty() ||
          b.phase == "setup")
        return;
      (*pending)["resumed_step"] = b.start_step;
      (*pending)["steps_lost"] =
          std::max<int64_t>(0, (*pending)["step_reached"].get<int64_t>() - b.start_step);
      (*pending)["seconds_to_recover"] = since(failed_at);
      log.write();
      out << "tessera launch: restart " << (*pending)["restart"] << " recovered in "
          << (*pending)["seconds_to_recover"].get<double>() << " s: resumed at step "
          << b.start_step << ", " << (*pending)["steps_lost"] << " steps lost\n"
          << std::flush;
    };
    for (;;) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        exited = true;
        refresh();  // a short job may end between two polls
        note_recovery();
        break;
      }
      if (g_stop_signal != 0 && forwarded == 0) {
        forwarded = g_stop_signal;
        ::kill(pid, forwarded);  // the launcher forwards it to the ranks (docs/training.md)
      }
      refresh();
      note_recovery();
      if (forwarded == 0) {
        for (int r = 0; r < o.ranks; ++r) {
          const Beat& b = beats[size_t(r)];
          const bool seen = !b.text.empty();
          const double allow = std::max(o.heartbeat_timeout, b.phase == "save" ? b.allow : 0.0);
          const double silent = since(seen ? b.changed : started);
          if (silent <= allow) continue;
          cause = seen ? str_cat("rank ", r, " (pid ", b.pid, " on ", b.host,
                                 ") made no progress for ", int(silent), " s (phase ", b.phase,
                                 ", step ", b.step, ")")
                       : str_cat("rank ", r, " sent no heartbeat in ", int(silent),
                                 " s after the start");
          break;
        }
        if (!cause.empty()) break;
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(o.poll_seconds));
    }
    if (exited) {
      kill_job(pid, ranks_on_this_host(beats), false);  // anything the launcher left behind
      // The ranks' own statuses, from their last beats, over the launcher's: mpiexec may exit 0
      // after it forwarded a signal to ranks that exited 75.
      int code = exit_code_of(status);
      bool all_exited = true;
      int ranks_code = 0;
      for (const Beat& b : beats) {
        all_exited = all_exited && b.phase == "exit";
        if (b.phase == "exit" && b.status != 0 && ranks_code == 0) ranks_code = b.status;
      }
      if (all_exited || (code == 0 && ranks_code != 0)) code = ranks_code;
      std::string what = describe_status(status);
      if (code != exit_code_of(status)) what = str_cat("the ranks exited with status ", code, " (", what, ")");
      if (code == 0) {
        out << "tessera launch: the job finished after " << attempt << " restart"
            << (attempt == 1 ? "" : "s") << "\n";
        return 0;
      }
      if (forwarded != 0 || code == kPreemptedExit || code == kInterruptedExit) {
        out << "tessera launch: " << what
            << (code == kPreemptedExit ? " (preempted: not restarting; the scheduler requeues)"
                                       : " after a stop signal: not restarting")
            << "\n";
        return code;
      }
      if (code == kUnrunnableExit) {
        out << "tessera launch: " << what
            << " (a usage, layout or device error, the same on every try): not restarting\n";
        return code;
      }
      // Ended before any rank wrote a heartbeat: the launcher, or a rank's start, failed. Once
      // may be a node's hiccup; the same status twice in a row is the command itself (a launcher
      // that cannot start its program exits 255 under MPICH), and more tries would repeat it.
      const bool no_rank_beat =
          std::all_of(beats.begin(), beats.end(), [](const Beat& b) { return b.text.empty(); });
      if (no_rank_beat) {
        what += " before any rank wrote a heartbeat";
        cannot_start = code == unstarted_code;
      }
      unstarted_code = no_rank_beat ? code : -1;
      cause = what;
      last_code = code;
    } else {
      // Stuck: ask every rank for its diagnostics, give them the window, then kill.
      out << "tessera launch: " << cause << "; SIGUSR2 to every rank, kill in " << o.dump_window
          << " s\n"
          << std::flush;
      for (pid_t rank : ranks_on_this_host(beats)) ::kill(rank, SIGUSR2);
      const Clock::time_point asked = Clock::now();
      while (since(asked) < o.dump_window && ::waitpid(pid, &status, WNOHANG) != pid)
        std::this_thread::sleep_for(std::chrono::duration<double>(o.poll_seconds));
      kill_job(pid, ranks_on_this_host(beats), true);
      last_code = kCommFailedExit;
      unstarted_code = -1;
    }
    failed_at = Clock::now();
    last_cause = cause;
    if (nlohmann::json* pending = log.last(); pending != nullptr && !pending->contains("seconds_to_recover")) {
      (*pending)["seconds_to_recover"] = nullptr;  // failed again before a step
      (*pending)["recovered"] = false;
    }
    if (cannot_start) {
      log.write();
      out << "tessera launch: " << cause
          << ", as on the attempt before: the job cannot start; not restarting\n";
      return last_code;
    }
    if (attempt >= o.max_restarts) {
      log.write();
      out << "tessera launch: gave up after " << attempt << " restart"
          << (attempt == 1 ? "" : "s") << "; the last failure: " << cause << "\n";
      return last_code;
    }
    log.add({{"restart", attempt + 1},
             {"cause", cause},
             {"time", unix_now()},
             {"seconds_since_start", since(started)},
             {"step_reached", step_reached}});
    log.write();
    out << "tessera launch: " << cause << " (step reached " << step_reached << "); restart "
        << attempt + 1 << " of " << o.max_restarts << "\n"
        << std::flush;
  }
}

}  // namespace tessera::cli
