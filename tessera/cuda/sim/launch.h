#pragma once
// Running a kernel launch in the simulator. Every block of the grid runs; blocks are spread over
// host threads (OpenMP) and the threads of one block run as fibers on one host thread, so
// atomics are real atomics and plain global-memory traffic between blocks is as unordered as
// on a GPU. tessera::cuda::launch (device.h) is the entry point kernels are launched through;
// this header holds the knobs tests and tools may turn.

#include <cstddef>
#include <string>

#include "tessera/cuda/sim/device_api.h"
#include "tessera/cuda/sim/hardware_limits.h"

namespace tessera::cuda::sim {

// The order in which a block's threads first run (each runs until it blocks). Forward runs
// thread 0 to its first barrier before thread 1 starts, so a thread that reads what others
// have not yet written reads poison; Reverse catches the mirror-image bug.
enum class Schedule { kForward, kReverse };

struct SimOptions {
  bool detect_races = true;      // shared-memory race detection (slower shared accesses)
  Schedule schedule = Schedule::kForward;
  size_t stack_bytes = 64 * 1024;  // per simulated thread; raise for kernels with big frames
  int host_threads = 0;            // blocks in parallel; 0: OpenMP's default
  bool check_guards = true;        // check every device buffer's guard bytes after a launch
  // Static plus dynamic shared memory one block may use (the opt-in maximum of the GPU being
  // modelled; 227 KiB on sm_90, lower to model a smaller part).
  size_t max_shared_bytes_per_block = kMaxSharedBytesPerBlock;
};

SimOptions options();
void set_options(const SimOptions& options);

// Sets options for one scope and restores the previous ones.
class ScopedOptions {
 public:
  explicit ScopedOptions(const SimOptions& options) : saved_(sim::options()) {
    set_options(options);
  }
  ~ScopedOptions() { set_options(saved_); }
  ScopedOptions(const ScopedOptions&) = delete;
  ScopedOptions& operator=(const ScopedOptions&) = delete;

 private:
  SimOptions saved_;
};

// The kernel as a type-erased call: body(context) runs the kernel function for the current
// simulated thread.
struct KernelBody {
  void (*call)(const void* context);
  const void* context;
};

struct KernelLaunch {
  const char* name;
  dim3 grid;
  dim3 block;
  size_t dynamic_shared_bytes;
  KernelBody body;
};

// Runs every block; throws tessera::Error for misuse found in any block (the lowest-numbered
// failing block is reported) or, after the launch, for corrupted guard bytes.
void run_kernel(const KernelLaunch& launch);

}  // namespace tessera::cuda::sim
