#include "cli/live_line.h"

#include <unistd.h>

#include <cstdio>

#include "tessera/train/metrics.h"

namespace tessera::cli {

LiveLine::LiveLine()
    : live_(isatty(STDOUT_FILENO) == 1), start_(std::chrono::steady_clock::now()), last_() {}

LiveLine::~LiveLine() { finish(); }

double LiveLine::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void LiveLine::update(const std::string& text, bool force) {
  if (!live_) return;
  const auto now = std::chrono::steady_clock::now();
  if (shown_ && !force && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  shown_ = true;
  std::printf("\r\x1b[2K%s, elapsed %s", text.c_str(), train::clock_text(elapsed_s()).c_str());
  std::fflush(stdout);
}

void LiveLine::finish() {
  if (!shown_) return;
  shown_ = false;
  std::printf("\r\x1b[2K");
  std::fflush(stdout);
}

}  // namespace tessera::cli
