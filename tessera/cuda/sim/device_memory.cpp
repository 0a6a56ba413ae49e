// Guarded simulated device memory (device_memory.h). One allocation holds
// [front guard][data][back guard + padding]; the data starts kDeviceAlignment-aligned and the
// back guard starts at its very last byte + 1, so even a one-byte overrun is seen. Guard byte i
// holds a position-dependent pattern, so that storing a constant over the guards cannot leave
// them intact by accident. A registry (mutex-protected map) knows every live buffer.

#include "tessera/cuda/sim/device_memory.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <new>

#include "tessera/core/error.h"

namespace tessera::cuda::sim {
namespace {

struct Allocation {
  std::string name;
  size_t bytes;
};

std::mutex g_mutex;
std::map<std::byte*, Allocation>& registry() {
  static auto* map = new std::map<std::byte*, Allocation>();  // outlives static destructors
  return *map;
}

uint8_t guard_byte(size_t i) { return uint8_t(0x5a + 0x3b * i); }

size_t total_bytes(size_t bytes) {
  return (kGuardBytes + bytes + kGuardBytes + kDeviceAlignment - 1) / kDeviceAlignment *
         kDeviceAlignment;
}

void write_guards(std::byte* data, size_t bytes) {
  for (size_t i = 0; i < kGuardBytes; ++i) {
    data[-std::ptrdiff_t(kGuardBytes) + std::ptrdiff_t(i)] = std::byte(guard_byte(i));
    data[bytes + i] = std::byte(guard_byte(i));
  }
}

}  // namespace

void* device_malloc(size_t bytes, std::string_view name) {
  auto* base = static_cast<std::byte*>(
      ::operator new(total_bytes(bytes), std::align_val_t(kDeviceAlignment)));
  std::byte* data = base + kGuardBytes;
  std::memset(data, 0xff, bytes);
  write_guards(data, bytes);
  std::lock_guard<std::mutex> lock(g_mutex);
  registry().emplace(data, Allocation{std::string(name), bytes});
  return data;
}

void device_free(void* p) {
  if (p == nullptr) return;
  auto* data = static_cast<std::byte*>(p);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = registry().find(data);
    TESSERA_CHECK(it != registry().end(),
                  "device_free: pointer was not returned by device_malloc or was freed already");
    registry().erase(it);
  }
  ::operator delete(data - kGuardBytes, std::align_val_t(kDeviceAlignment));
}

void check_guards(std::string_view context) {
  std::lock_guard<std::mutex> lock(g_mutex);
  for (auto& [data, alloc] : registry()) {
    std::ptrdiff_t first = 0;
    size_t changed = 0;
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (data[-std::ptrdiff_t(kGuardBytes) + std::ptrdiff_t(i)] != std::byte(guard_byte(i))) {
        if (changed++ == 0) first = -std::ptrdiff_t(kGuardBytes) + std::ptrdiff_t(i);
      }
    }
    for (size_t i = 0; i < kGuardBytes; ++i) {
      if (data[alloc.bytes + i] != std::byte(guard_byte(i))) {
        if (changed++ == 0) first = std::ptrdiff_t(alloc.bytes + i);
      }
    }
    if (changed == 0) continue;
    write_guards(data, alloc.bytes);
    const std::string place =
        first < 0 ? str_cat(-first, " bytes before its start")
                  : str_cat(size_t(first) - alloc.bytes, " bytes past its end");
    ::tessera::detail::throw_error("out-of-bounds write ", context, ": device buffer '", alloc.name, "' (",
                        alloc.bytes, " bytes) has ", changed,
                        " guard bytes overwritten, the first at byte offset ", first, " (", place,
                        ")");
  }
}

size_t live_device_buffers() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return registry().size();
}

}  // namespace tessera::cuda::sim
