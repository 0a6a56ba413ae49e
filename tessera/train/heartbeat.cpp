#include "tessera/train/heartbeat.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"

namespace tessera::train {

namespace fs = std::filesystem;

std::string heartbeat_path(const std::string& dir, int rank) {
  return (fs::path(dir) / str_cat("rank_", rank, ".json")).string();
}

Heartbeat::Heartbeat(std::string dir, int rank)
    : dir_(std::move(dir)), path_(heartbeat_path(dir_, rank)), rank_(rank), pid_(::getpid()) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  TESSERA_CHECK(!ec, "heartbeat: cannot create ", dir_, ": ", ec.message());
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  host_ = host;
}

void Heartbeat::finish(int status) {
  write_beat("exit", step_, start_step_, 0, status);
}

void Heartbeat::beat(const std::string& phase, int64_t step, int64_t start_step,
                     double allow_seconds) {
  write_beat(phase, step, start_step, allow_seconds, -1);
}

void Heartbeat::write_beat(const std::string& phase, int64_t step, int64_t start_step,
                           double allow_seconds, int status) {
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  nlohmann::json j = {{"rank", rank_},   {"pid", pid_},
                            {"host", host_},   {"phase", phase},
                            {"step", step},    {"start_step", start_step},
                            {"allow_s", allow_seconds}, {"time", now}};
  if (status >= 0) j["status"] = status;
  const std::string text = j.dump() + "\n";
  // Temp file and rename, no fsync (heartbeat.h says why).
  const std::string tmp = str_cat(path_, ".tmp.", pid_);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TESSERA_CHECK(fd >= 0, "heartbeat: cannot open ", tmp, ": ", std::strerror(errno));
  const ssize_t wrote = ::write(fd, text.data(), text.size());
  const int saved = errno;
  ::close(fd);
  TESSERA_CHECK(wrote == ssize_t(text.size()), "heartbeat: cannot write ", tmp, ": ",
                std::strerror(saved));
  TESSERA_CHECK(::rename(tmp.c_str(), path_.c_str()) == 0, "heartbeat: cannot rename ", tmp,
                " to ", path_, ": ", std::strerror(errno));
  last_ = str_cat("rank ", rank_, " (pid ", pid_, " on ", host_, "): phase ", phase, ", step ",
                  step);
  phase_ = phase;
  step_ = step;
  start_step_ = start_step;
  if (on_beat_) on_beat_(*this);
}

}  // namespace tessera::train
