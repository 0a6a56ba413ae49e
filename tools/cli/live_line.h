#pragma once
// LiveLine: the one progress line a long command keeps at the bottom of a terminal. On a TTY
// each update() redraws it in place (carriage return, erase line), at most 10 times a second
// so a fast loop does not spend its time on the terminal; finish() erases it so the command's
// summary takes its place. Off a TTY it prints nothing: pipes and logs keep the plain lines.

#include <chrono>
#include <string>

namespace tessera::cli {

class LiveLine {
 public:
  LiveLine();  // live when stdout is a terminal
  ~LiveLine();  // erases a line still shown

  bool live() const { return live_; }
  double elapsed_s() const;

  // Redraws the line with `text` (the elapsed time appended); skipped when the last redraw
  // was under 100 ms ago, unless `force`.
  void update(const std::string& text, bool force = false);
  void finish();

 private:
  bool live_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace tessera::cli
