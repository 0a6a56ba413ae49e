// Grid execution (launch.h): blocks in parallel over OpenMP threads, each through its host
// thread's BlockRunner. Errors are deterministic: blocks after the lowest failing one may be
// skipped, blocks before it never are, so the lowest failing block is the one reported.

#include "tessera/cuda/sim/launch.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>

#include "tessera/core/error.h"
#include "tessera/cuda/sim/block_runner.h"
#include "tessera/cuda/sim/device_memory.h"

namespace tessera::cuda::sim {
namespace {

std::mutex g_options_mutex;
SimOptions g_options;

}  // namespace

SimOptions options() {
  std::lock_guard<std::mutex> lock(g_options_mutex);
  return g_options;
}

void set_options(const SimOptions& options) {
  TESSERA_CHECK(options.stack_bytes >= 16 * 1024, "kernel simulator: stack_bytes ",
                options.stack_bytes, " is below the 16 KiB minimum");
  TESSERA_CHECK(options.max_shared_bytes_per_block <= kMaxSharedBytesPerBlock,
                "kernel simulator: max_shared_bytes_per_block ",
                options.max_shared_bytes_per_block, " exceeds the sm_90 maximum of ",
                kMaxSharedBytesPerBlock, " bytes");
  TESSERA_CHECK(options.host_threads >= 0, "kernel simulator: host_threads must be >= 0, got ",
                options.host_threads);
  std::lock_guard<std::mutex> lock(g_options_mutex);
  g_options = options;
}

void run_kernel(const KernelLaunch& launch) {
  if (detail::g_runner != nullptr)
    ::tessera::detail::throw_error("kernel '", launch.name,
                        "' launched from inside a simulated kernel; the simulator has no "
                        "dynamic parallelism");
  const detail::LaunchInfo info{&launch, options()};
  TESSERA_CHECK(launch.dynamic_shared_bytes <= info.options.max_shared_bytes_per_block,
                "launch of kernel '", launch.name, "': ", launch.dynamic_shared_bytes,
                " bytes of dynamic shared memory exceed the simulator's limit of ",
                info.options.max_shared_bytes_per_block, " bytes per block");
  const dim3 grid = launch.grid;
  const int64_t num_blocks = int64_t(grid.x) * grid.y * grid.z;
  auto run_block = [&](int64_t b) {
    const auto u = uint64_t(b);
    const uint3 idx{unsigned(u % grid.x), unsigned(u / grid.x % grid.y),
                    unsigned(u / (uint64_t(grid.x) * grid.y))};
    detail::BlockRunner::for_this_thread().run_block(info, idx);
  };

  const int64_t threads = std::min<int64_t>(
      info.options.host_threads > 0 ? info.options.host_threads : omp_get_max_threads(),
      num_blocks);
  if (threads <= 1) {
    for (int64_t b = 0; b < num_blocks; ++b) run_block(b);
  } else {
    std::atomic<int64_t> first_failed{num_blocks};
    std::exception_ptr error;
    std::mutex error_mutex;
#pragma omp parallel for num_threads(int(threads)) schedule(dynamic, 1)
    for (int64_t b = 0; b < num_blocks; ++b) {
      if (b > first_failed.load(std::memory_order_relaxed)) continue;
      try {
        run_block(b);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (b < first_failed.load()) {
          first_failed.store(b);
          error = std::current_exception();
        }
      }
    }
    if (error) std::rethrow_exception(error);
  }
  if (info.options.check_guards) check_guards(str_cat("after kernel '", launch.name, "'"));
}

}  // namespace tessera::cuda::sim
