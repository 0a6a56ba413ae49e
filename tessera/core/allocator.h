#pragma once
// Per-device allocators with live, peak and reserved byte counters that tools read.
//
// live:     bytes handed out and not yet returned
// peak:     the highest `live` since the last reset_peak()
// reserved: bytes held from the system, including cached free blocks

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "tessera/core/device.h"
#include "tessera/core/error.h"

namespace tessera {

struct AllocatorStats {
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t reserved_bytes = 0;
  int64_t num_allocs = 0;  // allocate() calls since construction
};

// An allocation the device could not satisfy: the message names the device, the ops running
// (OpScope), the bytes asked for and the allocator's live, reserved and peak bytes.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual Device device() const = 0;
  // Returns memory for nbytes (aligned to 64 bytes); nbytes may be 0.
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  // Returns cached free blocks to the system.
  virtual void empty_cache() {}

  AllocatorStats stats() const;
  void reset_peak();

 protected:
  // Throws OutOfMemory for a request of nbytes; `detail` adds what the device said.
  [[noreturn]] void throw_out_of_memory(size_t nbytes, const std::string& detail) const;
  void record_allocate(size_t nbytes);
  void record_deallocate(size_t nbytes);
  void record_reserved(int64_t delta);

 private:
  std::atomic<int64_t> live_{0}, peak_{0}, reserved_{0}, count_{0};
};

// Host memory. Blocks of at least kCacheMinBytes are cached by size after free, because
// a training step frees and re-requests the same large sizes each step, and fresh pages from
// the kernel cost a fault each.
class CpuAllocator final : public Allocator {
 public:
  static constexpr size_t kAlignment = 64;
  static constexpr size_t kCacheMinBytes = size_t(1) << 16;

  ~CpuAllocator() override;
  Device device() const override { return Device::cpu(); }
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  void empty_cache() override;

 private:
  static size_t round_size(size_t nbytes);
  std::mutex mutex_;
  std::multimap<size_t, void*> free_blocks_;  // rounded size -> block
};

// The process-wide allocator for a device (the CPU one always exists; CUDA ones come from
// the CUDA backend when it is registered).
Allocator& allocator_for(Device device);

}  // namespace tessera
