// Allocator counters (live, peak, reserved, num_allocs) and the CPU allocator's cache of
// freed large blocks.

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tessera/core/detail/op_scope.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

// Out of memory is one clear error: the device, the op, the bytes asked for and what the
// allocator holds. 2^50 floats (4 PiB) is past any machine's memory, and Linux refuses such a
// block outright rather than overcommitting it.
TEST(Allocator, OutOfMemoryNamesTheOpTheBytesAndTheCounters) {
  Allocator& cpu = allocator_for(Device::cpu());
  const AllocatorStats before = cpu.stats();
  const int64_t n = int64_t(1) << 50;
  try {
    Tensor huge = zeros({n}, DType::f32);
    FAIL() << "a 4 PiB tensor was allocated";
  } catch (const OutOfMemory& e) {
    const std::string m = e.what();
    for (const std::string& part :
         {std::string("out of memory on cpu in zeros"), str_cat("asked for ", 4 * n, " bytes"),
          std::string(" live, "), std::string(" reserved, peak ")})
      EXPECT_NE(m.find(part), std::string::npos) << "'" << part << "' not in: " << m;
  }
  // Nothing was counted for the refused block.
  EXPECT_EQ(cpu.stats().live_bytes, before.live_bytes);
  // The op of a backward pass is named with its phase.
  Tensor x = ones({4});
  x.set_requires_grad(true);
  Tensor y = sum(mul(x, x));
  {
    const OpScope outer("my_step");
    EXPECT_EQ(OpScope::current(), "my_step");
    const OpScope inner("matmul", "backward");
    EXPECT_EQ(OpScope::current(), "my_step > matmul (backward)");
  }
  EXPECT_EQ(OpScope::current(), "");
  y.backward();
}

TEST(Allocator, CountsLivePeakAndAllocations) {
  CpuAllocator alloc;  // a private instance: no other test's tensors in its counters
  void* a = alloc.allocate(1000);
  void* b = alloc.allocate(3000);
  AllocatorStats s = alloc.stats();
  EXPECT_EQ(s.live_bytes, 4000);
  EXPECT_EQ(s.peak_bytes, 4000);
  EXPECT_EQ(s.num_allocs, 2);
  alloc.deallocate(b, 3000);
  s = alloc.stats();
  EXPECT_EQ(s.live_bytes, 1000);
  EXPECT_EQ(s.peak_bytes, 4000);  // peak remembers the high-water mark
  alloc.reset_peak();
  EXPECT_EQ(alloc.stats().peak_bytes, 1000);  // ... until reset to the current live bytes
  void* c = alloc.allocate(500);
  EXPECT_EQ(alloc.stats().peak_bytes, 1500);
  EXPECT_EQ(alloc.stats().num_allocs, 3);
  alloc.deallocate(a, 1000);
  alloc.deallocate(c, 500);
  EXPECT_EQ(alloc.stats().live_bytes, 0);
  EXPECT_EQ(alloc.stats().num_allocs, 3);  // frees do not count
}

TEST(Allocator, BlocksAreAlignedAndZeroBytesIsAllowed) {
  CpuAllocator alloc;
  for (size_t n : {size_t(0), size_t(1), size_t(63), size_t(65), size_t(1) << 17}) {
    void* p = alloc.allocate(n);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % CpuAllocator::kAlignment, 0u) << n;
    alloc.deallocate(p, n);
  }
  EXPECT_EQ(alloc.stats().live_bytes, 0);
}

TEST(Allocator, SmallBlocksGoBackToTheSystem) {
  CpuAllocator alloc;
  void* p = alloc.allocate(100);
  EXPECT_GE(alloc.stats().reserved_bytes, 100);
  alloc.deallocate(p, 100);
  EXPECT_EQ(alloc.stats().reserved_bytes, 0);
}

TEST(Allocator, LargeBlocksAreCachedAndReused) {
  CpuAllocator alloc;
  const size_t n = (size_t(1) << 20) + 123;  // not a page multiple
  void* first = alloc.allocate(n);
  const int64_t reserved = alloc.stats().reserved_bytes;
  EXPECT_GE(reserved, int64_t(n));
  alloc.deallocate(first, n);
  EXPECT_EQ(alloc.stats().live_bytes, 0);
  EXPECT_EQ(alloc.stats().reserved_bytes, reserved);  // kept in the cache
  // A training step frees and re-requests the same sizes: nothing new is reserved.
  for (int step = 0; step < 10; ++step) {
    void* p = alloc.allocate(n);
    EXPECT_EQ(p, first);
    EXPECT_EQ(alloc.stats().reserved_bytes, reserved);
    alloc.deallocate(p, n);
  }
  // Two blocks at once need a second one; both are then cached.
  void* a = alloc.allocate(n);
  void* b = alloc.allocate(n);
  EXPECT_NE(a, b);
  EXPECT_EQ(alloc.stats().reserved_bytes, 2 * reserved);
  alloc.deallocate(a, n);
  alloc.deallocate(b, n);
  EXPECT_EQ(alloc.stats().reserved_bytes, 2 * reserved);
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().reserved_bytes, 0);
  EXPECT_EQ(alloc.stats().num_allocs, 13);
}

TEST(Allocator, TensorsReportToTheDeviceAllocator) {
  Allocator& alloc = allocator_for(Device::cpu());
  AllocatorStats before = alloc.stats();
  {
    Tensor t = empty({1000, 100});  // 400000 bytes
    AllocatorStats during = alloc.stats();
    EXPECT_EQ(during.live_bytes - before.live_bytes, 400000);
    EXPECT_EQ(during.num_allocs - before.num_allocs, 1);
    EXPECT_GE(during.peak_bytes, during.live_bytes);
    Tensor v = ops::transpose(t, 0, 1);  // views allocate nothing
    EXPECT_EQ(v.storage(), t.storage());
    EXPECT_EQ(alloc.stats().num_allocs, during.num_allocs);
  }
  EXPECT_EQ(alloc.stats().live_bytes, before.live_bytes);
}

TEST(Allocator, ReleasedStorageReturnsItsBytes) {
  Allocator& alloc = allocator_for(Device::cpu());
  Tensor t = empty({1 << 16});
  int64_t live = alloc.stats().live_bytes;
  t.storage()->release();
  EXPECT_EQ(alloc.stats().live_bytes, live - (int64_t(1) << 18));
  t.storage()->reallocate();
  EXPECT_EQ(alloc.stats().live_bytes, live);
}

}  // namespace
}  // namespace tessera
