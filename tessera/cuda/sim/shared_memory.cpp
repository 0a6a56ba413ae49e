// Per-block shared memory and the race detector (block_runner.h).
//
// Layout: the launch's dynamic shared memory at offset 0, then every static declaration in the
// order the block first reaches it, each aligned to 16 bytes. Memory is filled with 0xff
// (NaN for floats) when a block starts or a declaration is placed, so a read of a value nobody
// wrote is visible.
//
// Race detection: a shadow cell per byte remembers the reads, plain writes and atomics of the
// current barrier interval (epoch) that are not yet ordered before the running thread (the first
// two threads, and whether there were more). Two accesses of different threads in the same interval, one of them a
// write (atomics conflict only with plain accesses), are a race unless both threads are in one
// warp and a full-warp __syncwarp() separates them. Each interval contains every access between
// two barriers whatever the schedule, so a missing __syncthreads() is reported on every run,
// not only when the schedule happens to expose it. Cost: O(bytes accessed) per access.

#include <algorithm>
#include <cstring>

#include "tessera/core/error.h"
#include "tessera/cuda/sim/block_runner.h"

namespace tessera::cuda::sim::detail {
namespace {

constexpr size_t kSharedAlignment = 16;
constexpr uint8_t kPoison = 0xff;

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

const char* access_verb(SharedAccess access) {
  switch (access) {
    case SharedAccess::kRead: return "reads";
    case SharedAccess::kWrite: return "writes";
    case SharedAccess::kAtomic: return "atomically updates";
  }
  return "accesses";
}

}  // namespace

void SharedMemory::begin_block(size_t dynamic_bytes, size_t max_bytes, bool detect_races) {
  if (!storage_) {
    // 128-byte aligned base: vector loads and any alignas() up to 128 work as on the device.
    capacity_ = kMaxSharedBytesPerBlock;
    storage_ = std::make_unique<std::byte[]>(capacity_ + 128);
    base_ = reinterpret_cast<std::byte*>(align_up(reinterpret_cast<uintptr_t>(storage_.get()), 128));
  }
  max_bytes_ = std::min(max_bytes, capacity_);
  dynamic_bytes_ = dynamic_bytes;
  static_begin_ = static_end_ = align_up(dynamic_bytes, kSharedAlignment);
  placed_.clear();
  detect_races_ = detect_races;
  std::memset(base_, kPoison, dynamic_bytes);
  ensure_shadow(dynamic_bytes);
  block_epoch_ = ++epoch_;
}

SharedWindow SharedMemory::window() const {
  return SharedWindow{base_, base_ + capacity_, detect_races_};
}

void SharedMemory::ensure_shadow(size_t bytes) {
  if (detect_races_ && shadow_.size() < bytes) shadow_.resize(bytes);
}

void* SharedMemory::allocate_static(const SharedDecl& decl) {
  for (const Placed& p : placed_)
    if (p.decl == &decl) return base_ + p.offset;
  const BlockRunner& runner = *g_runner;
  const size_t bytes = decl.elem_size * decl.count;
  const size_t offset = align_up(static_end_, std::max(kSharedAlignment, decl.elem_align));
  const size_t static_total = offset + bytes - static_begin_;
  if (static_total > kMaxStaticSharedBytes)
    runner.fail(str_cat("shared memory declaration '", decl.name, "' (", decl.count, " x ",
                        decl.elem_size, " = ", bytes, " bytes) at ", decl.file, ":", decl.line,
                        " brings the block's static shared memory to ", static_total,
                        " bytes, over the limit of ", kMaxStaticSharedBytes,
                        " bytes (48 KiB); use dynamic shared memory for more"));
  if (offset + bytes > max_bytes_)
    runner.fail(str_cat("shared memory declaration '", decl.name, "' (", bytes, " bytes) at ",
                        decl.file, ":", decl.line, " brings the block's shared memory to ",
                        static_total, " bytes static + ", dynamic_bytes_,
                        " bytes dynamic, over the limit of ", max_bytes_, " bytes per block"));
  std::memset(base_ + offset, kPoison, bytes);
  placed_.push_back(Placed{&decl, offset});
  static_end_ = offset + bytes;
  ensure_shadow(static_end_);
  return base_ + offset;
}

void* SharedMemory::dynamic(const SharedDecl& decl, size_t* count) {
  if (decl.elem_align > kSharedAlignment)
    g_runner->fail(str_cat("dynamic shared memory '", decl.name, "' at ", decl.file, ":",
                           decl.line, " needs ", decl.elem_align,
                           "-byte alignment; dynamic shared memory is 16-byte aligned"));
  *count = dynamic_bytes_ / decl.elem_size;
  return base_;
}

bool SharedMemory::conflicts(const AccessSet& set, int thread, int warp, uint16_t gen) const {
  if (set.epoch != epoch_) return false;
  const bool others = set.first != thread || (set.second != kNone && set.second != thread) ||
                      set.more;
  return others && !(set.warp == warp && set.gen != gen);  // a full-warp __syncwarp() orders
}

void SharedMemory::add(AccessSet& set, int thread, int warp, uint16_t gen) const {
  if (set.epoch != epoch_ || (set.warp == warp && set.gen != gen)) {
    set = AccessSet{epoch_, uint16_t(thread), kNone, uint16_t(warp), gen, false};  // all ordered
    return;
  }
  if (set.first != thread && set.second != thread) {
    if (set.second == kNone) {
      set.second = uint16_t(thread);
    } else {
      set.more = true;
    }
  }
  if (set.warp != warp) set.warp = kMany;
  set.gen = gen;
}

std::string SharedMemory::describe(size_t offset, const SharedDecl* decl, int64_t index) const {
  if (decl != nullptr)
    return str_cat("'", decl->name, "'[", index, "] (declared at ", decl->file, ":", decl->line,
                   ")");
  for (const Placed& p : placed_) {
    const size_t bytes = p.decl->elem_size * p.decl->count;
    if (offset >= p.offset && offset < p.offset + bytes)
      return str_cat("'", p.decl->name, "'[", (offset - p.offset) / p.decl->elem_size,
                     "] (declared at ", p.decl->file, ":", p.decl->line, ")");
  }
  return str_cat("dynamic shared memory byte ", offset);
}

std::string SharedMemory::describe_others(const AccessSet& set, int thread) const {
  const BlockRunner& runner = *g_runner;
  std::string out;
  int named = 0;
  for (uint16_t other : {set.first, set.second}) {
    if (other == kNone || other == thread) continue;
    out += str_cat(named++ == 0 ? "thread " : " and thread ", runner.thread_name(other));
  }
  if (set.more) out += " and other threads";
  return out;
}

void SharedMemory::access(const void* p, size_t bytes, SharedAccess access,
                          const SharedDecl* decl, int64_t index) {
  const BlockRunner& runner = *g_runner;
  const auto offset = size_t(static_cast<const std::byte*>(p) - base_);
  if (offset + bytes > shadow_.size()) ensure_shadow(offset + bytes);
  const int thread = runner.current_thread();
  const int warp = thread / int(kWarpSize);
  const uint16_t gen = runner.warp_gen(warp);
  for (size_t k = offset; k < offset + bytes; ++k) {
    Shadow& cell = shadow_[k];
    const AccessSet* other = nullptr;
    const char* what = "";
    if (conflicts(cell.writes, thread, warp, gen)) {
      other = &cell.writes;
      what = "wrote";
    } else if (access != SharedAccess::kAtomic && conflicts(cell.atomics, thread, warp, gen)) {
      other = &cell.atomics;
      what = "updated atomically";
    } else if (access != SharedAccess::kRead && conflicts(cell.reads, thread, warp, gen)) {
      other = &cell.reads;
      what = "read";
    }
    if (other != nullptr)
      runner.fail(str_cat("shared-memory race: ", access_verb(access), " ",
                          describe(offset, decl, index), ", which ", describe_others(*other, thread), " ",
                          what, " in the same barrier interval (#", epoch_ - block_epoch_,
                          " of this block) with no __syncthreads() in between"));
    switch (access) {
      case SharedAccess::kRead: add(cell.reads, thread, warp, gen); break;
      case SharedAccess::kWrite: add(cell.writes, thread, warp, gen); break;
      case SharedAccess::kAtomic: add(cell.atomics, thread, warp, gen); break;
    }
  }
}

// ---- device API entry points ------------------------------------------------------------

void* shared_static(const SharedDecl& decl) {
  return running("TESSERA_SHARED").shared().allocate_static(decl);
}

void* shared_dynamic(const SharedDecl& decl, size_t* count) {
  return running("TESSERA_DYNAMIC_SHARED").shared().dynamic(decl, count);
}

void record_shared(const void* p, size_t bytes, SharedAccess access, const SharedDecl* decl,
                   int64_t index) {
  running("shared memory").shared().access(p, bytes, access, decl, index);
}

void shared_index_error(const SharedDecl& decl, int64_t index, size_t count) {
  running("shared memory").fail(str_cat(
      "index ", index, " is out of bounds for shared memory '", decl.name, "' (", count,
      " elements of ", decl.elem_size, " bytes, declared at ", decl.file, ":", decl.line, ")"));
}

}  // namespace tessera::cuda::sim::detail
