#include "tessera/parallel/comm/comm_health.h"

namespace tessera::parallel {

namespace {
std::atomic<bool>& process_broken() {
  static std::atomic<bool> broken{false};
  return broken;
}
}  // namespace

std::string CommHealth::reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reason_;
}

void CommHealth::fail(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (reason_.empty()) reason_ = message;
  }
  broken_.store(true, std::memory_order_release);
  process_broken().store(true, std::memory_order_release);
  throw CommError(message);
}

void CommHealth::check(const std::string& call) const {
  if (!broken()) [[likely]]
    return;
  throw CommError(str_cat(call, ": refused, the group is broken since an earlier failure: ",
                          reason()));
}

bool any_comm_broken() { return process_broken().load(std::memory_order_acquire); }

}  // namespace tessera::parallel
