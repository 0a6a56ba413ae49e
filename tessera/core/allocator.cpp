#include "tessera/core/allocator.h"

#include <cstdio>
#include <cstdlib>
#include <new>

#include "tessera/core/backend.h"
#include "tessera/core/error.h"
#include "tessera/core/detail/op_scope.h"

namespace tessera {

AllocatorStats Allocator::stats() const {
  return {live_.load(), peak_.load(), reserved_.load(), count_.load()};
}

void Allocator::reset_peak() {
  peak_.store(live_.load());
}

namespace {

// "2097152 bytes (2.00 MiB)": the exact count, and a readable size in KiB, MiB or GiB.
std::string bytes_text(int64_t bytes) {
  const double b = double(bytes);
  const int shift = b >= double(int64_t(1) << 30) ? 30 : b >= double(1 << 20) ? 20 : 10;
  const char* unit = shift == 30 ? "GiB" : shift == 20 ? "MiB" : "KiB";
  char buf[80];
  std::snprintf(buf, sizeof buf, "%lld bytes (%.2f %s)", (long long)bytes,
                b / double(int64_t(1) << shift), unit);
  return buf;
}

}  // namespace

void Allocator::throw_out_of_memory(size_t nbytes, const std::string& detail) const {
  const AllocatorStats s = stats();
  const std::string ops = OpScope::current();
  throw OutOfMemory(str_cat("out of memory on ", device(), ops.empty() ? "" : " in " + ops,
                            ": asked for ", bytes_text(int64_t(nbytes)), "; the allocator holds ",
                            bytes_text(s.live_bytes), " live, ", bytes_text(s.reserved_bytes),
                            " reserved, peak ", bytes_text(s.peak_bytes),
                            detail.empty() ? "" : "; " + detail));
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
  if (size >= kCacheMinBytes) {
    // Exact-size reuse: a step re-requests exactly the sizes it freed, and exact matching
    // keeps the reserved counter honest without tracking per-block slack.
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_blocks_.find(size);
    if (it != free_blocks_.end()) {
      void* p = it->second;
      free_blocks_.erase(it);
      record_allocate(nbytes);
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlignment, size);
  // Counted only once granted, so that the error's live and peak bytes are what is held.
  if (p == nullptr) throw_out_of_memory(nbytes, "the system refused the block");
  record_allocate(nbytes);
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
