#pragma once
// Simulated device memory: host allocations fenced by guard bytes. Every buffer has
// kGuardBytes of a known pattern right before its first byte and right after its last, and
// check_guards() (run after every simulated launch) reports any buffer whose guards changed:
// a kernel wrote out of bounds. New buffers are filled with 0xff (NaN as floats), as
// cudaMalloc'd memory holds garbage, so reading memory nobody wrote shows up in results.

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::cuda::sim {

inline constexpr size_t kGuardBytes = 256;
inline constexpr size_t kDeviceAlignment = 256;  // what cudaMalloc guarantees

// Returns `bytes` of simulated device memory named `name` (for error messages).
void* device_malloc(size_t bytes, std::string_view name);
// Frees memory from device_malloc; null is ignored. Throws for any other pointer.
void device_free(void* p);
// Checks the guards of every live buffer. On corruption throws tessera::Error naming
// `context`, the buffer, its size and the first changed byte (as an offset from the buffer's
// start: negative before it, >= size past its end), after restoring the guards so that one
// overrun is reported once.
void check_guards(std::string_view context);
size_t live_device_buffers();

// An owned simulated device buffer of `count` elements.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer(size_t count, std::string_view name)
      : data_(static_cast<T*>(device_malloc(count * sizeof(T), name))), count_(count) {}
  DeviceBuffer(const std::vector<T>& values, std::string_view name)
      : DeviceBuffer(values.size(), name) {
    if (!values.empty()) std::memcpy(data_, values.data(), values.size() * sizeof(T));
  }
  ~DeviceBuffer() { device_free(data_); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() const { return data_; }
  size_t size() const { return count_; }
  T& operator[](size_t i) const { return data_[i]; }
  std::vector<T> to_vector() const { return std::vector<T>(data_, data_ + count_); }

 private:
  T* data_;
  size_t count_;
};

}  // namespace tessera::cuda::sim
