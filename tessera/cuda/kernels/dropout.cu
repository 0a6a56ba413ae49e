// Dropout on the Philox4x32-10 stream shared with the CPU backend (tessera/core/detail/philox.h):
// element i is kept when the 32 bits at position offset + i reach drop_threshold(p), so the
// mask is the same bits on every backend, thread count and sharding. One Philox call gives four
// consecutive positions; each thread computes one call and handles those four elements (read,
// scale in the compute type, write), so no call is repeated. Bound: memory (one read and one
// write per element) on an H200; the ten 32-bit multiply rounds per four elements stay below
// it. out may be x (in place).

#include "tessera/cuda/kernels/dropout.h"

#include <type_traits>

#include "tessera/core/detail/philox.h"
#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kThreads = 256;

// Philox block b covers positions 4b .. 4b + 3; blocks first .. first + count - 1 cover
// [offset, offset + n).
template <class T>
__global__ void dropout_kernel(const T* x, T* out, int64_t n, uint32_t threshold, acc_t<T> scale,
                               uint64_t seed, uint64_t offset, uint64_t first, int64_t count) {
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < count;
       b += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t block = first + uint64_t(b);
    const philox::Block bits = philox::philox4x32(block, seed);
    for (int j = 0; j < 4; ++j) {
      const uint64_t pos = block * 4 + uint64_t(j);
      const int64_t i = int64_t(pos - offset);
      if (pos < offset || i >= n) continue;
      out[i] = convert<T>(bits.v[j] >= threshold ? load_acc(x + i) * scale : acc_t<T>(0));
    }
  }
}

}  // namespace

void dropout(const Tensor& x, const Tensor& out, double p, uint64_t seed, uint64_t offset,
             cudaStream_t stream) {
  TESSERA_CHECK(x.is_contiguous() && out.is_contiguous() && x.shape() == out.shape() &&
                    x.dtype() == out.dtype() && is_floating(x.dtype()),
                "cuda dropout: needs contiguous floating x and out of one shape and dtype, got ",
                x.describe(), " -> ", out.describe());
  TESSERA_CHECK(p >= 0.0 && p < 1.0, "cuda dropout: p must be in [0, 1), got ", p);
  const int64_t n = x.numel();
  if (n == 0) return;
  const uint64_t first = offset / 4;
  const int64_t count = int64_t((offset + uint64_t(n) - 1) / 4 - first + 1);
  const uint32_t threshold = philox::drop_threshold(p);
  dispatch_device(x.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!std::is_integral_v<T>) {
      using A = acc_t<T>;
      launch(dropout_kernel<T>,
             LaunchConfig{dim3(grid_blocks(count, kThreads)), dim3(kThreads), 0, stream, "dropout"},
             static_cast<const T*>(x.data_ptr("dropout")), static_cast<T*>(out.data_ptr("dropout")),
             n, threshold, A(1.0 / (1.0 - p)), seed, offset, first, count);
    }
  });
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
