// Copies and casts between strided tensors. Memory-bound: one read and one write per element.
// Same dtype, both contiguous and 16-byte aligned: a grid-stride loop of 16-byte vectors (the
// sub-16-byte tail element by element), i.e. a device memcpy at full bandwidth. Anything else
// (casts, strided views, broadcast sources): one thread per element over the coalesced shape,
// its linear index mapped to both operands' offsets (32-bit index math when it fits); the
// destination side is written in order, so its stores coalesce whenever dst is contiguous.
// Casts go through convert<D, S>, which rounds exactly as the CPU's element::convert (a 16-bit
// float passes through float on either side; bf16 and f16 round to nearest even).

#include "tessera/cuda/kernels/copy.h"

#include <type_traits>

#include "tessera/cuda/kernels/strided.h"
#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kThreads = 256;

// Copies nbytes; src and dst 16-byte aligned.
__global__ void copy_vec_kernel(const unsigned char* __restrict__ src,
                                unsigned char* __restrict__ dst, int64_t nbytes) {
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t n_vec = nbytes / 16;
  for (int64_t v = tid; v < n_vec; v += stride)
    reinterpret_cast<uint4*>(dst)[v] = reinterpret_cast<const uint4*>(src)[v];
  // The tail (under 16 bytes) goes byte by byte.
  for (int64_t b = n_vec * 16 + tid; b < nbytes; b += stride) dst[b] = src[b];
}

// Operands: dst, src.
template <class D, class S, class Index>
__global__ void cast_kernel(const S* __restrict__ src, D* __restrict__ dst, StridedOffsets<2> idx,
                            Index n) {
  for (Index i = Index(int64_t(blockIdx.x) * blockDim.x + threadIdx.x); i < n;
       i += Index(int64_t(gridDim.x) * blockDim.x)) {
    int64_t off[2];
    idx.offsets(i, off);
    dst[off[0]] = convert<D>(src[off[1]]);
  }
}

}  // namespace

void copy(const Tensor& src, const Tensor& dst, cudaStream_t stream) {
  TESSERA_CHECK(src.shape() == dst.shape(), "cuda copy: shapes differ, ", src.describe(), " -> ",
                dst.describe());
  const int64_t n = dst.numel();
  if (n == 0) return;
  const void* s = src.data_ptr("copy");
  void* d = dst.data_ptr("copy");
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous() && is_aligned16(s) &&
      is_aligned16(d)) {
    const int64_t nbytes = int64_t(dst.nbytes());
    launch(copy_vec_kernel,
           LaunchConfig{dim3(grid_blocks(nbytes / 16 + 1, kThreads)), dim3(kThreads), 0, stream,
                        "copy"},
           static_cast<const unsigned char*>(s), static_cast<unsigned char*>(d), nbytes);
    return;
  }
  const Strides* strides[2] = {&dst.strides(), &src.strides()};
  const StridedOffsets<2> idx = make_strided<2>(dst.shape(), strides);
  const LaunchConfig config{dim3(grid_blocks(n, kThreads)), dim3(kThreads), 0, stream, "copy"};
  dispatch_device(dst.dtype(), [&](auto* dtag) {
    using D = std::remove_pointer_t<decltype(dtag)>;
    dispatch_device(src.dtype(), [&](auto* stag) {
      using S = std::remove_pointer_t<decltype(stag)>;
      if (fits_int32(n)) {
        launch(cast_kernel<D, S, uint32_t>, config, static_cast<const S*>(s), static_cast<D*>(d),
               idx, uint32_t(n));
      } else {
        launch(cast_kernel<D, S, int64_t>, config, static_cast<const S*>(s), static_cast<D*>(d),
               idx, n);
      }
    });
  });
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
