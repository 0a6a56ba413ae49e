#include "tessera/core/device.h"

#include <ostream>

#include "tessera/core/error.h"

namespace tessera {

std::string Device::to_string() const {
  return type == DeviceType::cpu ? std::string("cpu") : "cuda:" + std::to_string(index);
}

Device Device::parse(const std::string& text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.rfind("cuda:", 0) == 0) {
    const std::string digits = text.substr(5);
    bool ok = !digits.empty() && digits.size() < 4 &&
              digits.find_first_not_of("0123456789") == std::string::npos;
    TESSERA_CHECK(ok, "unknown device '", text, "' (expected cpu, cuda or cuda:N)");
    return cuda(std::stoi(digits));
  }
  detail::throw_error("unknown device '", text, "' (expected cpu, cuda or cuda:N)");
}

std::ostream& operator<<(std::ostream& os, const Device& device) {
  return os << device.to_string();
}

}  // namespace tessera
