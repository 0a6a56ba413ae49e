#pragma once
// The device header: what every hand-written kernel includes. Compiled by nvcc (__CUDACC__) it
// is CUDA itself; compiled by the host compiler it maps the same spellings onto the kernel
// simulator (tessera/cuda/sim/), so one kernel source runs on the GPU and in CI without one.
//
// Writing a kernel against it:
//   - CUDA as usual: __global__/__device__, threadIdx..gridDim, __syncthreads(), the warp
//     intrinsics (__shfl*_sync, __ballot/any/all_sync, __reduce_*_sync, __syncwarp), atomics,
//     __threadfence, the float/bf16/f16 intrinsics, float2/float4/int4.
//   - Shared memory only through TESSERA_SHARED(type, name, count) and
//     TESSERA_DYNAMIC_SHARED(type, name); pass it to __device__ helpers as SharedPtr<T>.
//   - Tensor cores through mma_m16n8k16_bf16 / _f16 with MmaLayout's fragment layouts.
//   - Launch through tessera::cuda::launch(kernel, LaunchConfig{grid, block, dynamic_bytes,
//     stream, "name"}, args...): <<<>>> plus an error check under nvcc, every block in the
//     simulator.
//   - Put kernels and launchers in `inline namespace TESSERA_CUDA_ABI`, so a program that links
//     both builds of one source (GPU and simulated) has no clashing symbols.
// docs/kernel_simulator.md explains what the simulator checks and what it does not model.

#include <cstddef>
#include <cstdint>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/cuda/sim/hardware_limits.h"
#include "tessera/cuda/sim/mma_layout.h"

#if defined(__CUDACC__)

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#define TESSERA_CUDA_ABI gpu_build
#define TESSERA_SHARED(type, name, count) __shared__ __align__(16) type name[count]
#define TESSERA_DYNAMIC_SHARED(type, name)                                      \
  extern __shared__ __align__(16) unsigned char tessera_dynamic_shared_bytes[]; \
  type* name = reinterpret_cast<type*>(tessera_dynamic_shared_bytes)

#else

#include <source_location>

#include "tessera/cuda/sim/device_api.h"
#include "tessera/cuda/sim/launch.h"
#include "tessera/cuda/sim/streams.h"

#define TESSERA_CUDA_ABI sim_build
// A static object per declaration (and template instance) identifies it: every thread of the
// block receives the same memory for it.
#define TESSERA_SHARED(type, name, count)                                       \
  static constexpr ::tessera::cuda::sim::SharedDecl tessera_shared_decl_##name{ \
      #name, sizeof(type), alignof(type), size_t(count), __FILE__, __LINE__};   \
  const ::tessera::cuda::sim::SharedArray<type> name =                          \
      ::tessera::cuda::sim::shared_static<type>(tessera_shared_decl_##name)
#define TESSERA_DYNAMIC_SHARED(type, name)                                      \
  static constexpr ::tessera::cuda::sim::SharedDecl tessera_shared_decl_##name{ \
      #name, sizeof(type), alignof(type), 0, __FILE__, __LINE__};               \
  const ::tessera::cuda::sim::SharedArray<type> name =                          \
      ::tessera::cuda::sim::shared_dynamic<type>(tessera_shared_decl_##name)

#endif

namespace tessera::cuda {

// Shared memory as a __device__ helper's parameter: a pointer under nvcc, the checked view in
// the simulator.
#if defined(__CUDACC__)
template <class T>
using SharedPtr = T*;
#else
template <class T>
using SharedPtr = sim::SharedArray<T>;
#endif

// MmaLayout, the fragment layouts of mma.sync m16n8k16: tessera/cuda/sim/mma_layout.h.

// Two 16-bit values in one .b32 fragment register, `lo` in the low half.
__host__ __device__ inline uint32_t pack_bf16x2(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return uint32_t(__bfloat16_as_ushort(lo)) | (uint32_t(__bfloat16_as_ushort(hi)) << 16);
}
__host__ __device__ inline uint32_t pack_f16x2(__half lo, __half hi) {
  return uint32_t(__half_as_ushort(lo)) | (uint32_t(__half_as_ushort(hi)) << 16);
}

// D = A * B + C on the warp's tensor cores; every lane of the warp must call it (mma.sync).
#if defined(__CUDACC__)
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4],
                                                  const uint32_t (&b)[2], const float (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
#elif defined(__CUDA_ARCH__)
  __trap();  // bf16 mma.sync needs sm_80 or newer
#endif
}
__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4],
                                                 const uint32_t (&b)[2], const float (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
        "f"(c[2]), "f"(c[3]));
#elif defined(__CUDA_ARCH__)
  __trap();  // m16n8k16 mma.sync needs sm_80 or newer
#endif
}
#else
inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                              const float (&c)[4],
                              std::source_location loc = std::source_location::current()) {
  sim::detail::mma_sync(sim::detail::WarpOp::kMmaBf16, d, a, b, c, loc);
}
inline void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                             const float (&c)[4],
                             std::source_location loc = std::source_location::current()) {
  sim::detail::mma_sync(sim::detail::WarpOp::kMmaF16, d, a, b, c, loc);
}
#endif

inline namespace TESSERA_CUDA_ABI {

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  size_t dynamic_shared_bytes = 0;
  cudaStream_t stream = nullptr;
  const char* name = "kernel";  // for error messages; must outlive the launch
};

// Throws tessera::Error when `config` asks for more than the GPU (kMax* in hardware_limits.h)
// or for an empty grid or block.
inline void check_launch(const LaunchConfig& config) {
  const unsigned grid[3] = {config.grid.x, config.grid.y, config.grid.z};
  const unsigned block[3] = {config.block.x, config.block.y, config.block.z};
  auto dims = [](const unsigned* d) { return str_cat("(", d[0], ",", d[1], ",", d[2], ")"); };
  for (int i = 0; i < 3; ++i) {
    TESSERA_CHECK(grid[i] > 0 && block[i] > 0, "launch of kernel '", config.name, "': grid ",
                  dims(grid), " and block ", dims(block), " must be positive in every dimension");
    TESSERA_CHECK(block[i] <= kMaxBlockDim[i], "launch of kernel '", config.name, "': block ",
                  dims(block), " exceeds the maximum block dimension ", "xyz"[i], " = ",
                  kMaxBlockDim[i]);
    TESSERA_CHECK(grid[i] <= kMaxGridDim[i], "launch of kernel '", config.name, "': grid ",
                  dims(grid), " exceeds the maximum grid dimension ", "xyz"[i], " = ",
                  kMaxGridDim[i]);
  }
  const uint64_t threads = uint64_t(block[0]) * block[1] * block[2];
  TESSERA_CHECK(threads <= kMaxThreadsPerBlock, "launch of kernel '", config.name, "': block ",
                dims(block), " has ", threads, " threads, over the maximum of ",
                kMaxThreadsPerBlock);
  TESSERA_CHECK(config.dynamic_shared_bytes <= kMaxSharedBytesPerBlock, "launch of kernel '",
                config.name, "': ", config.dynamic_shared_bytes,
                " bytes of dynamic shared memory, over the maximum of ", kMaxSharedBytesPerBlock,
                " bytes per block");
}

#if defined(__CUDACC__)
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), const LaunchConfig& config, Args&&... args) {
  check_launch(config);
  if (config.dynamic_shared_bytes > kDefaultDynamicSharedBytes) {
    const cudaError_t status = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(config.dynamic_shared_bytes));
    TESSERA_CHECK(status == cudaSuccess, "launch of kernel '", config.name, "': cannot allow ",
                  config.dynamic_shared_bytes,
                  " bytes of dynamic shared memory: ", cudaGetErrorString(status));
  }
  kernel<<<config.grid, config.block, config.dynamic_shared_bytes, config.stream>>>(
      std::forward<Args>(args)...);
  const cudaError_t status = cudaGetLastError();
  TESSERA_CHECK(status == cudaSuccess, "launch of kernel '", config.name, "' (grid (",
                config.grid.x, ",", config.grid.y, ",", config.grid.z, "), block (", config.block.x,
                ",", config.block.y, ",", config.block.z, "), ", config.dynamic_shared_bytes,
                " bytes dynamic shared memory): ", cudaGetErrorString(status));
}
#else
template <class Kernel, class... Args>
void launch(Kernel&& kernel, const LaunchConfig& config, Args&&... args) {
  check_launch(config);
  // The launch keeps copies of the arguments, as CUDA does (it may run later: sim/streams.h's
  // deferred mode), and each simulated thread calls the kernel with its own copies of those.
  sim::submit(config.stream, [kernel, config, ... captured = std::decay_t<Args>(args)]() {
    auto body = [&]() { kernel(captured...); };
    using Body = decltype(body);
    sim::run_kernel(sim::KernelLaunch{
        config.name, config.grid, config.block, config.dynamic_shared_bytes,
        sim::KernelBody{[](const void* context) { (*static_cast<const Body*>(context))(); },
                        &body}});
  });
}
#endif

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
