// The runtime over the kernel simulator. Launches, copies, fills and frees go to sim/streams.h:
// run at once (immediate mode, the default), or queued on their stream and run when a
// synchronisation or an event wait needs them (deferred mode), where events are points in a
// stream's queue. The pool does not cache: each allocation is a fresh guarded buffer
// (sim/device_memory.h) that starts as NaN and is freed as soon as its stream gets there, so a
// kernel reading memory nobody wrote, or memory already returned, shows up in results instead
// of reading a stale block; reserved equals used.

#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>

#include "tessera/core/error.h"
#include "tessera/cuda/backend/runtime.h"
#include "tessera/cuda/sim/device_memory.h"
#include "tessera/cuda/sim/streams.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

// A point in the queue of the stream it was recorded on (sim/streams.h).
struct SimEvent {
  sim::StreamPoint point;
};

namespace runtime {
namespace {

std::mutex g_mutex;
std::unordered_map<void*, size_t>& pool_blocks() {
  static auto* blocks = new std::unordered_map<void*, size_t>();  // outlives static destructors
  return *blocks;
}
int64_t g_pool_bytes = 0;               // guarded by g_mutex
std::atomic<size_t> g_memory_limit{0};  // 0: none (set_simulated_memory_limit)
std::atomic<uintptr_t> g_next_stream{1};

void check_device(int device, const char* call) {
  TESSERA_CHECK(device == 0, call, ": the simulator has one device (cuda:0), got cuda:", device);
}

}  // namespace

int device_count() {
  return 1;
}

void set_memory_limit(size_t bytes) {
  g_memory_limit.store(bytes);
}

DeviceProperties device_properties(int device) {
  check_device(device, "device_properties");
  DeviceProperties p;
  p.name = "simulated (tessera/cuda/sim)";
  p.major = 9;
  p.minor = 0;
  p.multiprocessors = 1;
  p.total_memory = g_memory_limit.load();
  p.simulated = true;
  return p;
}

void set_device(int device) {
  check_device(device, "set_device");
}

void configure_pool(int device) {
  check_device(device, "configure_pool");
}

void* malloc_async(size_t bytes, int device, cudaStream_t /*stream*/) {
  check_device(device, "malloc_async");
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    const size_t limit = g_memory_limit.load();
    if (limit > 0 && size_t(g_pool_bytes) + bytes > limit) return nullptr;
  }
  void* p = sim::device_malloc(bytes, "cuda allocator block");
  std::lock_guard<std::mutex> lock(g_mutex);
  pool_blocks().emplace(p, bytes);
  g_pool_bytes += int64_t(bytes);
  return p;
}

void free_async(void* p, cudaStream_t stream) {
  if (p == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    TESSERA_CHECK(pool_blocks().count(p) != 0, "free_async: ", p,
                  " is not a live allocation of the simulated device pool");
  }
  // Stream-ordered: the block goes back once the stream's earlier work has run.
  sim::submit(stream, [p] {
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      auto it = pool_blocks().find(p);
      g_pool_bytes -= int64_t(it->second);
      pool_blocks().erase(it);
    }
    sim::device_free(p);
  });
}

PoolUsage pool_usage(int device) {
  check_device(device, "pool_usage");
  std::lock_guard<std::mutex> lock(g_mutex);
  return {g_pool_bytes, g_pool_bytes};
}

void trim_pool(int device) {
  check_device(device, "trim_pool");
}

void memcpy_async(void* dst, const void* src, size_t bytes, CopyKind /*kind*/,
                  cudaStream_t stream) {
  if (bytes > 0) sim::submit(stream, [=] { std::memmove(dst, src, bytes); });
}

void memcpy_to_host_now(void* dst, const void* src, size_t bytes) {
  // No stream: the simulated device's memory is host memory, and the caller vouches that no
  // queued work writes it.
  if (bytes > 0) std::memmove(dst, src, bytes);
}

void memset_async(void* dst, int byte, size_t bytes, cudaStream_t stream) {
  if (bytes > 0) sim::submit(stream, [=] { std::memset(dst, byte, bytes); });
}

void* host_alloc_pinned(size_t bytes) {
  // Nothing to lock: the simulated device reads host memory directly.
  return ::operator new(bytes > 0 ? bytes : 1, std::align_val_t(64));
}

void host_free_pinned(void* p) {
  ::operator delete(p, std::align_val_t(64));
}

cudaStream_t stream_create() {
  return reinterpret_cast<cudaStream_t>(g_next_stream.fetch_add(1));
}
void stream_destroy(cudaStream_t stream) {
  sim::retire(stream);
}
void stream_synchronize(cudaStream_t stream) {
  sim::drain(stream);
}

Event event_create() {
  return new SimEvent();
}
void event_destroy(Event event) {
  delete event;
}
void event_record(Event event, cudaStream_t stream) {
  event->point = sim::mark(stream);
}
void stream_wait_event(cudaStream_t stream, Event event) {
  sim::wait_for(stream, event->point);
}
void event_synchronize(Event event) {
  sim::drain_to(event->point);
}
bool event_query(Event event) {
  sim::drain_to(event->point);
  return true;
}
void device_synchronize() {
  sim::drain_all();
}

}  // namespace runtime
}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
