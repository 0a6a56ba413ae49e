#pragma once
// Where a tensor lives: the CPU, or one CUDA device.

#include <cstdint>
#include <iosfwd>
#include <string>

namespace tessera {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device&) const = default;

  std::string to_string() const;                 // "cpu", "cuda:0"
  static Device parse(const std::string& text);  // inverse of to_string; "cuda" means cuda:0
};

std::ostream& operator<<(std::ostream& os, const Device& device);

}  // namespace tessera
