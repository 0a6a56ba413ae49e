#pragma once
// Device-side helpers shared by the hand-written kernels: element types and their compute
// types, conversions that round exactly as the CPU backend does, 16-byte vector loads/stores,
// and warp/block reductions.
//
// Reductions use xor butterflies: after each step both lanes of a pair hold a + b (addition
// commutes bit-exactly), so every lane ends with the same bits, and a block reduction gives
// every thread the same value without another broadcast. Max propagates NaN like the CPU.

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tessera/core/dtype.h"
#include "tessera/core/tensor.h"
#include "tessera/cuda/device.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {

inline constexpr unsigned kFullMask = 0xffffffffu;

// ---- element types ----
// The compute type: double for f64, int64 for the integers, float otherwise (bf16/f16 load as
// float, compute in float, store rounded), as acc_type_t on the CPU.
template <class T>
struct AccOf {
  using type = float;
};
template <>
struct AccOf<double> {
  using type = double;
};
template <>
struct AccOf<int32_t> {
  using type = int64_t;
};
template <>
struct AccOf<int64_t> {
  using type = int64_t;
};
template <class T>
using acc_t = typename AccOf<T>::type;

template <class T>
inline constexpr bool is_half_type_v =
    std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;

// Any element type to float / double / integer, and back, with the CPU backend's rounding
// (element::convert): a 16-bit float goes through float on both sides; bf16 and f16 round to
// nearest even.
template <class D, class S>
__device__ __forceinline__ D convert(S s) {
  if constexpr (std::is_same_v<D, S>) {
    return s;
  } else if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    return convert<D>(__bfloat162float(s));
  } else if constexpr (std::is_same_v<S, __half>) {
    return convert<D>(__half2float(s));
  } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(s));
  } else if constexpr (std::is_same_v<D, __half>) {
    return __float2half_rn(static_cast<float>(s));
  } else {
    return static_cast<D>(s);
  }
}

template <class T>
__device__ __forceinline__ acc_t<T> load_acc(const T* p) {
  return convert<acc_t<T>>(*p);
}

// The device type of a dtype's elements: f(static_cast<T*>(nullptr)) for T in float, double,
// __nv_bfloat16, __half, int32_t, int64_t. Host code (launchers) only.
template <class F>
decltype(auto) dispatch_device(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32:
      return f(static_cast<float*>(nullptr));
    case DType::f64:
      return f(static_cast<double*>(nullptr));
    case DType::bf16:
      return f(static_cast<__nv_bfloat16*>(nullptr));
    case DType::f16:
      return f(static_cast<__half*>(nullptr));
    case DType::i32:
      return f(static_cast<int32_t*>(nullptr));
    case DType::i64:
      break;
  }
  return f(static_cast<int64_t*>(nullptr));
}

// A tensor's device pointer as T* (data_ptr names `op` if the tensor has no storage). Host
// code only.
template <class T>
T* typed(const Tensor& t, const char* op) {
  return static_cast<T*>(t.data_ptr(op));
}

// ---- math in the compute type (global C functions: inside namespace tessera an unqualified
// exp would find the tensor ops first) ----
#define TESSERA_CUDA_MATH1(name, f32, f64)           \
  __device__ __forceinline__ float name(float x) {   \
    return ::f32(x);                                 \
  }                                                  \
  __device__ __forceinline__ double name(double x) { \
    return ::f64(x);                                 \
  }
TESSERA_CUDA_MATH1(math_exp, expf, exp)
TESSERA_CUDA_MATH1(math_log, logf, log)
TESSERA_CUDA_MATH1(math_sqrt, sqrtf, sqrt)
TESSERA_CUDA_MATH1(math_tanh, tanhf, tanh)
TESSERA_CUDA_MATH1(math_cos, cosf, cos)
TESSERA_CUDA_MATH1(math_sin, sinf, sin)
#undef TESSERA_CUDA_MATH1
__device__ __forceinline__ float math_pow(float x, float y) {
  return ::powf(x, y);
}
__device__ __forceinline__ double math_pow(double x, double y) {
  return ::pow(x, y);
}
// NaN test for any compute type (always false for the integers).
template <class A>
__device__ __forceinline__ bool math_isnan(A x) {
  if constexpr (std::is_integral_v<A>) {
    return false;
  } else {
    return x != x;
  }
}

// ---- 16-byte vectors ----
template <class T>
inline constexpr int kVecWidth = int(16 / sizeof(T));

template <class T>
struct alignas(16) Vec {
  T v[kVecWidth<T>];
};

// True when p is 16-byte aligned (host or device).
__host__ __device__ inline bool is_aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// One 16-byte load (p must be 16-byte aligned), converted to the compute type.
template <class T>
__device__ __forceinline__ void load_vec(const T* p, acc_t<T> (&out)[kVecWidth<T>]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  Vec<T> pack;
  memcpy(static_cast<void*>(&pack), &raw, sizeof(pack));
  for (int i = 0; i < kVecWidth<T>; ++i) out[i] = convert<acc_t<T>>(pack.v[i]);
}

// One 16-byte store (p must be 16-byte aligned) of values rounded to T.
template <class T>
__device__ __forceinline__ void store_vec(T* p, const acc_t<T> (&in)[kVecWidth<T>]) {
  Vec<T> pack;
  for (int i = 0; i < kVecWidth<T>; ++i) pack.v[i] = convert<T>(in[i]);
  uint4 raw;
  memcpy(&raw, static_cast<const void*>(&pack), sizeof(raw));
  *reinterpret_cast<uint4*>(p) = raw;
}

// ---- reductions ----
// max that propagates NaN: a NaN on either side wins, as the CPU's reductions do.
template <class A>
__device__ __forceinline__ A nan_max(A a, A b) {
  return (a > b || math_isnan(a)) ? a : b;
}

template <class A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

template <class A>
__device__ __forceinline__ A warp_max(A v) {
  for (int offset = 16; offset > 0; offset /= 2)
    v = nan_max(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}

// Block-wide sum or max returned to every thread. blockDim.x must be a multiple of 32 and every
// thread must call it; `scratch` holds at least 32 values and may be reused after it returns.
template <class A>
__device__ A block_sum(A v, SharedPtr<A> scratch) {
  const unsigned lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  const unsigned num_warps = blockDim.x / warpSize;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  A total = lane < num_warps ? A(scratch[lane]) : A(0);
  total = warp_sum(total);
  __syncthreads();  // scratch may be written again by the caller
  return total;
}

template <class A>
__device__ A block_max(A v, SharedPtr<A> scratch) {
  const unsigned lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  const unsigned num_warps = blockDim.x / warpSize;
  v = warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  A total = A(scratch[lane < num_warps ? lane : 0]);
  total = warp_max(total);
  __syncthreads();
  return total;
}

// Blocks for a grid-stride loop over n items of `threads` each: enough to fill the GPU, capped
// so a tiny n does not launch empty blocks.
inline unsigned grid_blocks(int64_t n, int threads, int64_t max_blocks = 4096) {
  const int64_t needed = (n + threads - 1) / threads;
  return unsigned(needed < 1 ? 1 : (needed < max_blocks ? needed : max_blocks));
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
