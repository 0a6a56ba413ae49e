#include "tessera/core/allocator.h"

#include <cstdlib>
#include <new>

#include "tessera/core/backend.h"
#include "tessera/core/error.h"

namespace tessera {

AllocatorStats Allocator::stats() const {
  return {live_.load(), peak_.load(), reserved_.load(), count_.load()};
}

void Allocator::reset_peak() {
  peak_.store(live_.load());
}

void Allocator::record_allocate(size_t nbytes) {
  int64_t live = live_.fetch_add(int64_t(nbytes)) + int64_t(nbytes);
  count_.fetch_add(1);
  int64_t peak = peak_.load();
  while (live > peak && !peak_.compare_exchange_weak(peak, live)) {
  }
}

void Allocator::record_deallocate(size_t nbytes) {
  live_.fetch_sub(int64_t(nbytes));
}

void Allocator::record_reserved(int64_t delta) {
  reserved_.fetch_add(delta);
}

CpuAllocator::~CpuAllocator() {
  empty_cache();
}

size_t CpuAllocator::round_size(size_t nbytes) {
  if (nbytes < kCacheMinBytes) return (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  const size_t page = 4096;
  return (nbytes + page - 1) / page * page;
}

void* CpuAllocator::allocate(size_t nbytes) {
  size_t size = round_size(std::max<size_t>(nbytes, 1));
  record_allocate(nbytes);
  if (size >= kCacheMinBytes) {
    // Exact-size reuse: a step re-requests exactly the sizes it freed, and exact matching
    // keeps the reserved counter honest without tracking per-block slack.
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_blocks_.find(size);
    if (it != free_blocks_.end()) {
      void* p = it->second;
      free_blocks_.erase(it);
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlignment, size);
  if (p == nullptr) {
    record_deallocate(nbytes);
    throw Error(str_cat("cpu allocator: out of memory allocating ", nbytes, " bytes (",
                        stats().live_bytes, " bytes live)"));
  }
  record_reserved(int64_t(size));
  return p;
}

void CpuAllocator::deallocate(void* ptr, size_t nbytes) {
  if (ptr == nullptr) return;
  size_t size = round_size(std::max<size_t>(nbytes, 1));
  record_deallocate(nbytes);
  if (size >= kCacheMinBytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_blocks_.emplace(size, ptr);
    return;
  }
  std::free(ptr);
  record_reserved(-int64_t(size));
}

void CpuAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [size, p] : free_blocks_) {
    std::free(p);
    record_reserved(-int64_t(size));
  }
  free_blocks_.clear();
}

Allocator& allocator_for(Device device) {
  return backend_for(device).allocator();
}

}  // namespace tessera
