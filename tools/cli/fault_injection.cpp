#include "cli/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <regex>

#include "tessera/core/error.h"

namespace tessera::cli {

FaultInjection::FaultInjection(int rank, int world_size) {
  const char* spec = std::getenv("TESSERA_FAULT");
  if (spec == nullptr || *spec == '\0') return;
  const char* attempt_env = std::getenv("TESSERA_LAUNCH_ATTEMPT");
  const int attempt = attempt_env != nullptr ? std::atoi(attempt_env) : 0;
  std::cmatch m;
  if (std::regex_match(spec, m, std::regex("(kill|stop|hang):(all|[0-9]+)@([0-9]+)"))) {
    kind_ = m[1] == "kill" ? Kind::kill : m[1] == "stop" ? Kind::stop : Kind::hang;
    step_ = std::stoll(m[3]);
    mine_ = attempt == 0 && (m[2] == "all" || std::stoi(m[2]) == rank);
  } else if (std::regex_match(spec, m, std::regex("slow:([0-9]+)"))) {
    kind_ = Kind::slow;
    mine_ = std::stoi(m[1]) == rank;
  } else if (std::regex_match(spec, m, std::regex("delay:(data|compute):([0-9]+):([0-9]+)(@([0-9]+))?"))) {
    kind_ = Kind::delay;
    delay_ = {m[1].str(), std::stod(m[3]), m[5].matched ? std::stoll(m[5]) : 1};
    mine_ = std::stoi(m[2]) == rank;
  } else if (std::regex_match(spec, m, std::regex("storm:([0-9]+)x([0-9]+)"))) {
    kind_ = Kind::storm;
    step_ = std::stoll(m[1]);
    mine_ = attempt < std::stoi(m[2]) && attempt % world_size == rank;
  } else {
    detail::throw_error("TESSERA_FAULT: '", spec, "' is not kill:R@S, stop:R@S, hang:R@S, ",
                        "storm:KxN, slow:R or delay:data|compute:R:MS[@S] ",
                        "(cli/fault_injection.h)");
  }
}

void FaultInjection::after_beat(const std::string& phase, int64_t step, int64_t start_step) const {
  if (!mine_ || phase != "step") return;
  const int64_t at = kind_ == Kind::storm ? start_step + step_ : step_;
  if (step != at) return;
  switch (kind_) {
    case Kind::kill:
    case Kind::storm:
      ::raise(SIGKILL);
      break;
    case Kind::stop:
      ::raise(SIGSTOP);
      break;
    case Kind::hang:
      for (;;) ::pause();  // signal handlers still run: the SIGUSR2 dump answers
    case Kind::slow:
    case Kind::delay:
    case Kind::none:
      break;
  }
}

}  // namespace tessera::cli
