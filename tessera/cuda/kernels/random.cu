// Uniform and normal random tensors from the Philox4x32-10 counter-based generator
// (tessera/core/detail/philox.h, shared with the CPU backend, so the draws are the same function of
// (seed, position) on both). One Philox call yields four 32-bit lanes; each thread computes one
// call and writes every element that uses it (4 uniforms, or 2 normals by Box-Muller on lanes
// (0, 1) and (2, 3)), so no lane is computed twice. Bound: compute (ten rounds of 32-bit
// multiplies per call; the normal's log/cos/sqrt in f64), well under memory bandwidth on an
// H200 whose f64 rate is high.
//
// Bit-identity with the CPU: the uniform is lo + (hi - lo) * u in f64 then one rounding, exact
// IEEE on both sides. The normal's f64 log and cos are libm's in the simulator (identical) and
// CUDA's on the GPU (within 1 ulp of libm's): after rounding to f32 or narrower, the results
// differ only when an f64 value lies within an ulp of a rounding boundary, ~2^-28 per element.

#include "tessera/cuda/kernels/random.h"

#include <type_traits>

#include "tessera/core/detail/philox.h"
#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kThreads = 256;
constexpr double kTwoPi = 6.283185307179586;  // 2 * M_PI, as the CPU computes it

// Philox blocks (of `per_block` consecutive positions) that cover positions [offset, offset + n).
struct BlockRange {
  uint64_t first;
  int64_t count;
};
BlockRange block_range(uint64_t offset, int64_t n, int per_block) {
  const uint64_t first = offset / uint64_t(per_block);
  const uint64_t last = (offset + uint64_t(n) - 1) / uint64_t(per_block);
  return {first, int64_t(last - first + 1)};
}

template <class T>
__global__ void uniform_kernel(T* __restrict__ out, int64_t n, double lo, double hi, uint64_t seed,
                               uint64_t offset, uint64_t first, int64_t count) {
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < count;
       b += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t block = first + uint64_t(b);
    const philox::Block bits = philox::philox4x32(block, seed);
    for (int j = 0; j < 4; ++j) {
      // Element i uses position offset + i; positions before offset or past the end belong to
      // other tensors.
      const int64_t i = int64_t(block * 4 + uint64_t(j) - offset);
      if (block * 4 + uint64_t(j) < offset || i >= n) continue;
      const double u = philox::to_unit_float(bits.v[j]);
      out[i] = convert<T>(lo + (hi - lo) * u);
    }
  }
}

template <class T>
__global__ void normal_kernel(T* __restrict__ out, int64_t n, double mean, double stddev,
                              uint64_t seed, uint64_t offset, uint64_t first, int64_t count) {
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < count;
       b += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t block = first + uint64_t(b);
    const philox::Block bits = philox::philox4x32(block, seed);
    for (int j = 0; j < 2; ++j) {
      const uint64_t pos = block * 2 + uint64_t(j);
      const int64_t i = int64_t(pos - offset);
      if (pos < offset || i >= n) continue;
      const double u1 = (double(bits.v[2 * j] >> 8) + 1.0) * (1.0 / 16777216.0);  // (0, 1]
      const double u2 = double(bits.v[2 * j + 1] >> 8) * (1.0 / 16777216.0);
      const double z = math_sqrt(-2.0 * math_log(u1)) * math_cos(kTwoPi * u2);
      out[i] = convert<T>(mean + stddev * z);
    }
  }
}

void check_dst(const char* op, const Tensor& dst) {
  TESSERA_CHECK(dst.is_contiguous() && is_floating(dst.dtype()), "cuda ", op,
                ": needs a contiguous floating tensor, got ", dst.describe());
}

}  // namespace

void random_uniform(const Tensor& dst, double lo, double hi, uint64_t seed, uint64_t offset,
                    cudaStream_t stream) {
  check_dst("rand", dst);
  const int64_t n = dst.numel();
  if (n == 0) return;
  const BlockRange range = block_range(offset, n, 4);
  dispatch_device(dst.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!std::is_integral_v<T>) {
      launch(
          uniform_kernel<T>,
          LaunchConfig{dim3(grid_blocks(range.count, kThreads)), dim3(kThreads), 0, stream, "rand"},
          typed<T>(dst, "rand"), n, lo, hi, seed, offset, range.first, range.count);
    }
  });
}

void random_normal(const Tensor& dst, double mean, double stddev, uint64_t seed, uint64_t offset,
                   cudaStream_t stream) {
  check_dst("randn", dst);
  const int64_t n = dst.numel();
  if (n == 0) return;
  const BlockRange range = block_range(offset, n, 2);
  dispatch_device(dst.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!std::is_integral_v<T>) {
      launch(normal_kernel<T>,
             LaunchConfig{dim3(grid_blocks(range.count, kThreads)), dim3(kThreads), 0, stream,
                          "randn"},
             typed<T>(dst, "randn"), n, mean, stddev, seed, offset, range.first, range.count);
    }
  });
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
