#include "cli/diagnostics_dump.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "tessera/parallel/comm/flight_watch.h"

namespace tessera::cli {

namespace {

// Two buffers: set_status fills the idle one and then publishes it, so the handler never reads
// a line being written (unless two updates land inside one dump: the line may then mix two
// beats, still one line).
constexpr size_t kLine = 480;
char g_lines[2][kLine] = {};
std::atomic<int> g_current{0};
struct sigaction g_previous;

void on_dump(int) {
  // One write of the whole line, so that ranks dumping at once do not interleave.
  static const char kPrefix[] = "tessera train: SIGUSR2 diagnostics: last heartbeat ";
  static const char kNone[] = "none yet (setting up)";
  char out[sizeof kPrefix + kLine + 1];
  const char* line = g_lines[g_current.load(std::memory_order_acquire)];
  if (line[0] == '\0') line = kNone;
  size_t n = sizeof kPrefix - 1;
  std::memcpy(out, kPrefix, n);
  const size_t len = ::strnlen(line, kLine - 1);
  std::memcpy(out + n, line, len);
  n += len;
  out[n++] = '\n';
  const ssize_t ignored = ::write(STDERR_FILENO, out, n);
  (void)ignored;
  parallel::FlightWatch::request_from_signal();  // the watch thread dumps the ring
}

}  // namespace

DiagnosticsDump::DiagnosticsDump() {
  struct sigaction action {};
  action.sa_handler = on_dump;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &action, &g_previous);
}

DiagnosticsDump::~DiagnosticsDump() { sigaction(SIGUSR2, &g_previous, nullptr); }

void DiagnosticsDump::set_status(const std::string& status) {
  const int idle = 1 - g_current.load(std::memory_order_relaxed);
  const size_t n = std::min(status.size(), kLine - 1);
  std::memcpy(g_lines[idle], status.data(), n);
  g_lines[idle][n] = '\0';
  g_current.store(idle, std::memory_order_release);
}

}  // namespace tessera::cli
