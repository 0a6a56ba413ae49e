#pragma once
// The simulator's half of tessera/cuda/device.h: what a kernel sees when that header is compiled
// by the host compiler. Include tessera/cuda/device.h, not this file.
//
// The built-in variables (threadIdx, blockIdx, blockDim, gridDim) read the context of the
// simulated thread that is running; barriers, warp collectives and shared memory go through
// the block scheduler (block_runner.h). Every synchronising call takes a defaulted
// std::source_location, so misuse reports name the line of the kernel that made it.

#include <math.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>

#include "tessera/core/half.h"
#include "tessera/cuda/sim/hardware_limits.h"
#include "tessera/cuda/sim/shared_memory.h"

namespace tessera::cuda::sim {

// CUDA's vector types: same members, size and alignment as in vector_types.h.
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}  // NOLINT: as in CUDA
};
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) int2 {
  int x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) double2 {
  double x, y;
};

namespace detail {

struct ThreadView {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
// The simulated thread running on this host thread; null outside a kernel.
inline thread_local const ThreadView* g_view = nullptr;

[[noreturn]] void outside_kernel(const char* what);

inline const ThreadView& thread_view() {
  const ThreadView* view = g_view;
  if (view == nullptr) [[unlikely]]
    outside_kernel("threadIdx/blockIdx/blockDim/gridDim");
  return *view;
}

enum class BarrierKind : uint8_t { kSync, kCount, kAnd, kOr };
int barrier(BarrierKind kind, int predicate, std::source_location loc);

enum class WarpOp : uint8_t {
  kShflIdx,
  kShflUp,
  kShflDown,
  kShflXor,
  kBallot,
  kAny,
  kAll,
  kReduceAddI,
  kReduceAddU,
  kReduceMinI,
  kReduceMinU,
  kReduceMaxI,
  kReduceMaxU,
  kReduceAnd,
  kReduceOr,
  kReduceXor,
  kSyncWarp,
  kMmaBf16,
  kMmaF16,
};
const char* warp_op_name(WarpOp op);

// One lane's operands of a warp collective and its result.
struct LaneIn {
  uint32_t words[10];  // the value (shuffles: up to 8 bytes), predicate, or mma fragments A, B, C
  int32_t param;       // source lane, delta or lane mask
  int32_t width;       // shuffle segment width
  uint32_t size;       // bytes of the shuffled type
};
struct LaneOut {
  uint32_t words[4];
};
LaneOut warp_collective(WarpOp op, unsigned mask, const LaneIn& in, std::source_location loc);
unsigned active_mask();

template <class T>
T shuffle(WarpOp op, unsigned mask, T value, int param, int width, std::source_location loc) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8);
  LaneIn in{};
  std::memcpy(in.words, &value, sizeof(T));
  in.param = param;
  in.width = width;
  in.size = sizeof(T);
  const LaneOut out = warp_collective(op, mask, in, loc);
  T result;
  std::memcpy(&result, out.words, sizeof(T));
  return result;
}

inline uint32_t warp_word(WarpOp op, unsigned mask, uint32_t value, std::source_location loc) {
  LaneIn in{};
  in.words[0] = value;
  in.size = 4;
  return warp_collective(op, mask, in, loc).words[0];
}

void mma_sync(WarpOp op, float* d, const uint32_t* a, const uint32_t* b, const float* c,
              std::source_location loc);

// Lets other threads of the block run: atomicCAS / atomicExch yield so that a thread spinning
// on a lock held by another thread of its block makes progress.
void yield_thread();

template <class T, class Op>
T atomic_update(T* address, Op op) {
  if (in_shared(address) && g_shared_window.track)
    record_shared(address, sizeof(T), SharedAccess::kAtomic, nullptr, -1);
  std::atomic_ref<T> ref(*address);
  return op(ref);
}

template <class T, class Pick>
T atomic_pick(T* address, T value, Pick pick) {
  return atomic_update(address, [&](std::atomic_ref<T>& ref) {
    T old = ref.load();
    while (!ref.compare_exchange_weak(old, pick(old, value))) {
    }
    return old;
  });
}

}  // namespace detail
}  // namespace tessera::cuda::sim

// ---- CUDA's names, in the global namespace as nvcc provides them ---------------------------

using tessera::cuda::sim::dim3;
using tessera::cuda::sim::double2;
using tessera::cuda::sim::float2;
using tessera::cuda::sim::float4;
using tessera::cuda::sim::int2;
using tessera::cuda::sim::int4;
using tessera::cuda::sim::uint2;
using tessera::cuda::sim::uint3;
using tessera::cuda::sim::uint4;

// Streams do not exist in the simulator (launches run synchronously); the type is CUDA's.
struct CUstream_st;
using cudaStream_t = CUstream_st*;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

#define threadIdx (::tessera::cuda::sim::detail::thread_view().thread_idx)
#define blockIdx (::tessera::cuda::sim::detail::thread_view().block_idx)
#define blockDim (::tessera::cuda::sim::detail::thread_view().block_dim)
#define gridDim (::tessera::cuda::sim::detail::thread_view().grid_dim)

inline constexpr int warpSize = 32;

inline constexpr float2 make_float2(float x, float y) { return {x, y}; }
inline constexpr float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline constexpr int2 make_int2(int x, int y) { return {x, y}; }
inline constexpr int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
inline constexpr uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline constexpr uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
  return {x, y, z, w};
}
inline constexpr double2 make_double2(double x, double y) { return {x, y}; }

// ---- barriers ----
inline void __syncthreads(std::source_location loc = std::source_location::current()) {
  ::tessera::cuda::sim::detail::barrier(::tessera::cuda::sim::detail::BarrierKind::kSync, 1, loc);
}
inline int __syncthreads_count(int predicate,
                               std::source_location loc = std::source_location::current()) {
  return ::tessera::cuda::sim::detail::barrier(
      ::tessera::cuda::sim::detail::BarrierKind::kCount, predicate, loc);
}
inline int __syncthreads_and(int predicate,
                             std::source_location loc = std::source_location::current()) {
  return ::tessera::cuda::sim::detail::barrier(::tessera::cuda::sim::detail::BarrierKind::kAnd,
                                               predicate, loc);
}
inline int __syncthreads_or(int predicate,
                            std::source_location loc = std::source_location::current()) {
  return ::tessera::cuda::sim::detail::barrier(::tessera::cuda::sim::detail::BarrierKind::kOr,
                                               predicate, loc);
}
inline void __syncwarp(unsigned mask = 0xffffffffu,
                       std::source_location loc = std::source_location::current()) {
  ::tessera::cuda::sim::detail::warp_word(::tessera::cuda::sim::detail::WarpOp::kSyncWarp, mask,
                                          0, loc);
}

// ---- warp shuffles, votes and reductions ----
#define TESSERA_SIM_SHUFFLES(T)                                                                  \
  inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize,                \
                       std::source_location loc = std::source_location::current()) {            \
    return ::tessera::cuda::sim::detail::shuffle(::tessera::cuda::sim::detail::WarpOp::kShflIdx, \
                                                 mask, var, src_lane, width, loc);              \
  }                                                                                             \
  inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize,           \
                          std::source_location loc = std::source_location::current()) {         \
    return ::tessera::cuda::sim::detail::shuffle(::tessera::cuda::sim::detail::WarpOp::kShflUp,  \
                                                 mask, var, int(delta), width, loc);            \
  }                                                                                             \
  inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize,         \
                            std::source_location loc = std::source_location::current()) {       \
    return ::tessera::cuda::sim::detail::shuffle(                                               \
        ::tessera::cuda::sim::detail::WarpOp::kShflDown, mask, var, int(delta), width, loc);    \
  }                                                                                             \
  inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize,           \
                           std::source_location loc = std::source_location::current()) {        \
    return ::tessera::cuda::sim::detail::shuffle(::tessera::cuda::sim::detail::WarpOp::kShflXor, \
                                                 mask, var, lane_mask, width, loc);             \
  }
TESSERA_SIM_SHUFFLES(int)
TESSERA_SIM_SHUFFLES(unsigned)
TESSERA_SIM_SHUFFLES(long)
TESSERA_SIM_SHUFFLES(unsigned long)
TESSERA_SIM_SHUFFLES(long long)
TESSERA_SIM_SHUFFLES(unsigned long long)
TESSERA_SIM_SHUFFLES(float)
TESSERA_SIM_SHUFFLES(double)
TESSERA_SIM_SHUFFLES(::tessera::BFloat16)
TESSERA_SIM_SHUFFLES(::tessera::Half)
#undef TESSERA_SIM_SHUFFLES

inline unsigned __ballot_sync(unsigned mask, int predicate,
                              std::source_location loc = std::source_location::current()) {
  return ::tessera::cuda::sim::detail::warp_word(::tessera::cuda::sim::detail::WarpOp::kBallot,
                                                 mask, predicate != 0, loc);
}
inline int __any_sync(unsigned mask, int predicate,
                      std::source_location loc = std::source_location::current()) {
  return int(::tessera::cuda::sim::detail::warp_word(::tessera::cuda::sim::detail::WarpOp::kAny,
                                                     mask, predicate != 0, loc));
}
inline int __all_sync(unsigned mask, int predicate,
                      std::source_location loc = std::source_location::current()) {
  return int(::tessera::cuda::sim::detail::warp_word(::tessera::cuda::sim::detail::WarpOp::kAll,
                                                     mask, predicate != 0, loc));
}
inline unsigned __activemask() { return ::tessera::cuda::sim::detail::active_mask(); }

#define TESSERA_SIM_REDUCE(name, T, op)                                                        \
  inline T name(unsigned mask, T value,                                                        \
                std::source_location loc = std::source_location::current()) {                  \
    return T(::tessera::cuda::sim::detail::warp_word(::tessera::cuda::sim::detail::WarpOp::op, \
                                                     mask, uint32_t(value), loc));             \
  }
TESSERA_SIM_REDUCE(__reduce_add_sync, int, kReduceAddI)
TESSERA_SIM_REDUCE(__reduce_add_sync, unsigned, kReduceAddU)
TESSERA_SIM_REDUCE(__reduce_min_sync, int, kReduceMinI)
TESSERA_SIM_REDUCE(__reduce_min_sync, unsigned, kReduceMinU)
TESSERA_SIM_REDUCE(__reduce_max_sync, int, kReduceMaxI)
TESSERA_SIM_REDUCE(__reduce_max_sync, unsigned, kReduceMaxU)
TESSERA_SIM_REDUCE(__reduce_and_sync, unsigned, kReduceAnd)
TESSERA_SIM_REDUCE(__reduce_or_sync, unsigned, kReduceOr)
TESSERA_SIM_REDUCE(__reduce_xor_sync, unsigned, kReduceXor)
#undef TESSERA_SIM_REDUCE

// ---- atomics: real atomics, since blocks run on several host threads ----
#define TESSERA_SIM_ATOMIC_RMW(name, T, call)                                       \
  inline T name(T* address, T value) {                                              \
    return ::tessera::cuda::sim::detail::atomic_update(                             \
        address, [&](std::atomic_ref<T>& ref) { return ref.call(value); });         \
  }
TESSERA_SIM_ATOMIC_RMW(atomicAdd, int, fetch_add)
TESSERA_SIM_ATOMIC_RMW(atomicAdd, unsigned, fetch_add)
TESSERA_SIM_ATOMIC_RMW(atomicAdd, unsigned long long, fetch_add)
TESSERA_SIM_ATOMIC_RMW(atomicAdd, float, fetch_add)
TESSERA_SIM_ATOMIC_RMW(atomicAdd, double, fetch_add)
TESSERA_SIM_ATOMIC_RMW(atomicSub, int, fetch_sub)
TESSERA_SIM_ATOMIC_RMW(atomicSub, unsigned, fetch_sub)
TESSERA_SIM_ATOMIC_RMW(atomicAnd, int, fetch_and)
TESSERA_SIM_ATOMIC_RMW(atomicAnd, unsigned, fetch_and)
TESSERA_SIM_ATOMIC_RMW(atomicAnd, unsigned long long, fetch_and)
TESSERA_SIM_ATOMIC_RMW(atomicOr, int, fetch_or)
TESSERA_SIM_ATOMIC_RMW(atomicOr, unsigned, fetch_or)
TESSERA_SIM_ATOMIC_RMW(atomicOr, unsigned long long, fetch_or)
TESSERA_SIM_ATOMIC_RMW(atomicXor, int, fetch_xor)
TESSERA_SIM_ATOMIC_RMW(atomicXor, unsigned, fetch_xor)
TESSERA_SIM_ATOMIC_RMW(atomicXor, unsigned long long, fetch_xor)
#undef TESSERA_SIM_ATOMIC_RMW

#define TESSERA_SIM_ATOMIC_PICK(name, T, expr)                                                \
  inline T name(T* address, T value) {                                                        \
    return ::tessera::cuda::sim::detail::atomic_pick(address, value,                          \
                                                     [](T old, T v) { return expr; });        \
  }
TESSERA_SIM_ATOMIC_PICK(atomicMax, int, old > v ? old : v)
TESSERA_SIM_ATOMIC_PICK(atomicMax, unsigned, old > v ? old : v)
TESSERA_SIM_ATOMIC_PICK(atomicMax, long long, old > v ? old : v)
TESSERA_SIM_ATOMIC_PICK(atomicMax, unsigned long long, old > v ? old : v)
TESSERA_SIM_ATOMIC_PICK(atomicMin, int, old < v ? old : v)
TESSERA_SIM_ATOMIC_PICK(atomicMin, unsigned, old < v ? old : v)
TESSERA_SIM_ATOMIC_PICK(atomicMin, long long, old < v ? old : v)
TESSERA_SIM_ATOMIC_PICK(atomicMin, unsigned long long, old < v ? old : v)
// CUDA's wrapping counters: inc resets to 0 past `value`, dec to `value` below 1.
TESSERA_SIM_ATOMIC_PICK(atomicInc, unsigned, old >= v ? 0u : old + 1)
TESSERA_SIM_ATOMIC_PICK(atomicDec, unsigned, (old == 0 || old > v) ? v : old - 1)
#undef TESSERA_SIM_ATOMIC_PICK

#define TESSERA_SIM_ATOMIC_EXCH_CAS(T)                                                       \
  inline T atomicExch(T* address, T value) {                                                 \
    const T old = ::tessera::cuda::sim::detail::atomic_update(                               \
        address, [&](std::atomic_ref<T>& ref) { return ref.exchange(value); });              \
    ::tessera::cuda::sim::detail::yield_thread();                                            \
    return old;                                                                              \
  }                                                                                          \
  inline T atomicCAS(T* address, T compare, T value) {                                       \
    const T old = ::tessera::cuda::sim::detail::atomic_update(                               \
        address, [&](std::atomic_ref<T>& ref) {                                              \
          T expected = compare;                                                              \
          ref.compare_exchange_strong(expected, value);                                      \
          return expected;                                                                   \
        });                                                                                  \
    ::tessera::cuda::sim::detail::yield_thread();                                            \
    return old;                                                                              \
  }
TESSERA_SIM_ATOMIC_EXCH_CAS(int)
TESSERA_SIM_ATOMIC_EXCH_CAS(unsigned)
TESSERA_SIM_ATOMIC_EXCH_CAS(unsigned long long)
#undef TESSERA_SIM_ATOMIC_EXCH_CAS
inline float atomicExch(float* address, float value) {
  return ::tessera::cuda::sim::detail::atomic_update(
      address, [&](std::atomic_ref<float>& ref) { return ref.exchange(value); });
}

inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// ---- math and bit intrinsics (the fast-math forms are exact here; see docs) ----
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __exp10f(float x) { return std::pow(10.0f, x); }
inline float __logf(float x) { return std::log(x); }
inline float __log2f(float x) { return std::log2(x); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanhf(float x) { return std::tanh(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fmaf_rn(float x, float y, float z) { return std::fma(x, y, z); }
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }
inline int __float2int_rn(float x) { return int(std::nearbyint(x)); }
inline int __float2int_rz(float x) { return int(x); }
// Four signed bytes of a dotted with those of b, plus c (sm_61+'s dp4a), in int32.
inline int __dp4a(int a, int b, int c) {
  for (int j = 0; j < 4; ++j)
    c += int(static_cast<signed char>(unsigned(a) >> (8 * j))) *
         int(static_cast<signed char>(unsigned(b) >> (8 * j)));
  return c;
}
inline float __int2float_rn(int x) { return float(x); }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline double __longlong_as_double(long long x) { return std::bit_cast<double>(x); }
inline long long __double_as_longlong(double x) { return std::bit_cast<long long>(x); }
inline int __popc(unsigned x) { return std::popcount(x); }
inline int __popcll(unsigned long long x) { return std::popcount(x); }
inline int __clz(int x) { return std::countl_zero(unsigned(x)); }
inline int __clzll(long long x) { return std::countl_zero((unsigned long long)(x)); }
inline int __ffs(int x) { return x == 0 ? 0 : std::countr_zero(unsigned(x)) + 1; }
inline int __ffsll(long long x) {
  return x == 0 ? 0 : std::countr_zero((unsigned long long)(x)) + 1;
}
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
template <class T>
inline T __ldg(const T* address) {
  return *address;
}

// ---- 16-bit floats: Tessera's storage types carry the same bits as CUDA's ----
using __nv_bfloat16 = ::tessera::BFloat16;
using __half = ::tessera::Half;
inline __nv_bfloat16 __float2bfloat16(float x) { return __nv_bfloat16(x); }
inline __nv_bfloat16 __float2bfloat16_rn(float x) { return __nv_bfloat16(x); }
inline float __bfloat162float(__nv_bfloat16 x) { return float(x); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 x) { return x.bits; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) {
  __nv_bfloat16 x;
  x.bits = bits;
  return x;
}
inline __half __float2half(float x) { return __half(x); }
inline __half __float2half_rn(float x) { return __half(x); }
inline float __half2float(__half x) { return float(x); }
inline unsigned short __half_as_ushort(__half x) { return x.bits; }
inline __half __ushort_as_half(unsigned short bits) {
  __half x;
  x.bits = bits;
  return x;
}
