#pragma once
// Per-block and per-grid limits of the target GPU (sm_90: H100/H200). launch() checks a
// configuration against them in both modes and the simulator enforces the shared-memory ones,
// so a kernel that runs in the simulator does not fail on the device for asking too much.

#include <cstddef>

namespace tessera::cuda {

inline constexpr unsigned kWarpSize = 32;
inline constexpr unsigned kMaxThreadsPerBlock = 1024;
inline constexpr unsigned kMaxBlockDim[3] = {1024, 1024, 64};
inline constexpr unsigned kMaxGridDim[3] = {2147483647u, 65535, 65535};

// Static __shared__ declarations of one block may total 48 KiB. Dynamic shared memory above
// 48 KiB needs an opt-in (launch() makes it), up to 227 KiB for static plus dynamic on sm_90.
inline constexpr size_t kMaxStaticSharedBytes = 48 * 1024;
inline constexpr size_t kDefaultDynamicSharedBytes = 48 * 1024;
inline constexpr size_t kMaxSharedBytesPerBlock = 227 * 1024;

}  // namespace tessera::cuda
