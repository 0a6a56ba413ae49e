#pragma once
// The block scheduler: runs one thread block at a time on the calling host thread, its threads
// as fibers, each until it blocks (barrier, warp collective) or exits. Also the owner of the
// block's barrier, its warps' pending collectives and its shared memory. Misuse is reported as
// tessera::Error naming the kernel, block and threads, never as a hang:
//   - a thread reaches __syncthreads() after another thread of the block exited, or exits
//     while others wait at one;
//   - threads wait at different __syncthreads() call sites;
//   - a warp collective names lanes that have exited, or lanes disagree on the collective;
//   - nothing can run and not every thread has exited (deadlock).
// Internal to the simulator: kernels reach it through device_api.h.

#include <array>
#include <cstdint>
#include <exception>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "tessera/cuda/sim/device_api.h"
#include "tessera/cuda/sim/fiber.h"
#include "tessera/cuda/sim/launch.h"
#include "tessera/cuda/sim/shared_memory.h"

namespace tessera::cuda::sim::detail {

struct Site {
  const char* file = "";
  unsigned line = 0;
  unsigned column = 0;

  static Site from(const std::source_location& loc) {
    return {loc.file_name(), unsigned(loc.line()), unsigned(loc.column())};
  }
  bool operator==(const Site& other) const;
  std::string str() const;  // "file:line:column"
};

std::string hex_mask(unsigned mask);  // "0x0000ffff"

enum class ThreadStatus : uint8_t { kReady, kRunning, kBarrier, kWarp, kExited };

struct SimThread {
  Fiber fiber;
  ThreadView view{};
  int linear = 0;
  ThreadStatus status = ThreadStatus::kReady;
  Site wait_site;  // where a waiting thread waits
  int barrier_result = 0;
  int warp_slot = -1;  // pending collective this thread waits in
  LaneIn lane_in{};
  LaneOut lane_out{};
};

// A warp collective some lanes have reached and others not yet. Lanes join the one whose
// expected lanes overlap theirs; when the last arrives it computes every lane's result and the
// slot is freed, so back-to-back collectives never mix.
struct PendingWarpOp {
  bool in_use = false;
  WarpOp op = WarpOp::kSyncWarp;
  unsigned mask = 0;
  unsigned expected = 0;  // mask & lanes that exist
  unsigned arrived = 0;
  uint32_t size = 0;
  Site site;
};

struct WarpState {
  unsigned existing = 0;  // lanes the block has (a partial last warp has fewer)
  unsigned exited = 0;
  uint16_t sync_gen = 0;  // full-warp __syncwarp() count: orders shared accesses within a warp
  std::array<PendingWarpOp, kWarpSize> pending{};
};

// Shared memory of the running block and the race detector over it. The dynamic region comes
// first, static declarations are bump-allocated after it in the order first reached.
class SharedMemory {
 public:
  void begin_block(size_t dynamic_bytes, size_t max_bytes, bool detect_races);
  void* allocate_static(const SharedDecl& decl);
  void* dynamic(const SharedDecl& decl, size_t* count);
  void access(const void* p, size_t bytes, SharedAccess access, const SharedDecl* decl,
              int64_t index);
  void next_epoch() { ++epoch_; }
  SharedWindow window() const;

 private:
  static constexpr uint16_t kNone = 0xffff;
  static constexpr uint16_t kMany = 0xfffe;
  // The accesses to one byte in the current barrier interval (epoch) that are not yet ordered
  // before the running thread: the first two threads, and whether there were more.
  struct AccessSet {
    uint32_t epoch = 0;
    uint16_t first = 0;
    uint16_t second = kNone;
    uint16_t warp = 0;  // of every thread in the set, or kMany
    uint16_t gen = 0;   // that warp's __syncwarp count at the last access
    bool more = false;
  };
  struct Shadow {
    AccessSet reads, writes, atomics;
  };

  bool conflicts(const AccessSet& set, int thread, int warp, uint16_t gen) const;
  void add(AccessSet& set, int thread, int warp, uint16_t gen) const;
  void ensure_shadow(size_t bytes);
  std::string describe(size_t offset, const SharedDecl* decl, int64_t index) const;
  std::string describe_others(const AccessSet& set, int thread) const;

  std::unique_ptr<std::byte[]> storage_;
  std::byte* base_ = nullptr;
  size_t capacity_ = 0;
  size_t max_bytes_ = 0;
  size_t dynamic_bytes_ = 0;
  size_t static_begin_ = 0;
  size_t static_end_ = 0;
  struct Placed {
    const SharedDecl* decl;
    size_t offset;
  };
  std::vector<Placed> placed_;
  bool detect_races_ = false;
  std::vector<Shadow> shadow_;
  uint32_t epoch_ = 0;        // bumped per barrier and per block, never reset
  uint32_t block_epoch_ = 0;  // epoch at the block's start, for messages
};

struct LaunchInfo {
  const KernelLaunch* launch;
  SimOptions options;
};

class BlockRunner {
 public:
  // The runner of this host thread (one per thread; its fiber stacks are reused).
  static BlockRunner& for_this_thread();

  void run_block(const LaunchInfo& info, uint3 block_idx);

  // Entry points for the running simulated thread.
  int barrier(BarrierKind kind, int predicate, const Site& site);
  LaneOut warp_collective(WarpOp op, unsigned mask, const LaneIn& in, const Site& site);
  unsigned active_mask() const;
  void yield_thread();
  SharedMemory& shared() { return shared_; }

  int current_thread() const { return current_->linear; }
  uint16_t warp_gen(int warp) const { return warps_[size_t(warp)].sync_gen; }
  std::string thread_name(int linear) const;  // "(x,y,z)"
  // Throws tessera::Error prefixed with the kernel, block and running thread.
  [[noreturn]] void fail(const std::string& message) const;

 private:
  static void thread_main(void* arg);
  void prepare(const LaunchInfo& info, uint3 block_idx);
  void push_ready(int linear);
  void suspend();
  void on_exit(SimThread& thread);
  void complete(PendingWarpOp& op, int warp);
  void compute_shuffle(const PendingWarpOp& op, int warp);
  void compute_mma(const PendingWarpOp& op, int warp);
  [[noreturn]] void diagnose_deadlock() const;
  std::string where() const;
  std::string thread_list(const std::vector<int>& linear_ids) const;
  std::string lanes(unsigned mask) const;

  const LaunchInfo* info_ = nullptr;
  uint3 block_idx_{};
  int num_threads_ = 0;
  size_t stack_bytes_ = 0;
  std::vector<std::unique_ptr<FiberStack>> stacks_;
  std::vector<SimThread> threads_;
  std::vector<WarpState> warps_;
  std::vector<int> ready_;  // ring buffer of thread ids
  size_t ready_head_ = 0;
  size_t ready_count_ = 0;
  Fiber scheduler_;
  SimThread* current_ = nullptr;
  std::exception_ptr error_;
  int exited_ = 0;
  int barrier_waiting_ = 0;
  int barrier_true_ = 0;
  Site barrier_site_;
  SharedMemory shared_;
};

// The runner executing a block on this host thread; null outside a kernel.
inline thread_local BlockRunner* g_runner = nullptr;

// The running runner, or an error naming `what` when called outside a kernel.
BlockRunner& running(const char* what);

}  // namespace tessera::cuda::sim::detail
