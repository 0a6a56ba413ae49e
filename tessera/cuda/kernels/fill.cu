// fill and arange. Both are store-bound: one write per element and nothing read, so they run
// at the device's write bandwidth when stores coalesce.
//
// fill converts the value on the host, exactly as the CPU backend does (element::convert), and the
// kernels store its bit pattern: a contiguous destination aligned to 16 bytes gets 16-byte
// stores of the repeated pattern plus a scalar tail; any other layout gets one store per
// element at an offset decoded from the element's linear index. arange evaluates
// start + i * step in f64 per element (no running sum, so no drift) and converts with the same
// rounding as the host (half.h's conversions compile for both).

#include <cstring>

#include "tessera/core/detail/element_convert.h"
#include "tessera/cuda/kernels/fill.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;  // grid-stride loops beyond this

// A strided layout passed by value to the kernel.
struct Layout {
  int rank;
  int64_t sizes[Shape::kMaxDims];
  int64_t strides[Shape::kMaxDims];
};

Layout layout_of(const Tensor& t) {
  Layout l{};
  l.rank = t.dim();
  for (int d = 0; d < t.dim(); ++d) {
    l.sizes[d] = t.size(d);
    l.strides[d] = t.stride(d);
  }
  return l;
}

__device__ __forceinline__ int64_t strided_offset(const Layout& l, int64_t linear) {
  int64_t offset = 0;
  for (int d = l.rank - 1; d >= 0; --d) {
    offset += (linear % l.sizes[d]) * l.strides[d];
    linear /= l.sizes[d];
  }
  return offset;
}

unsigned blocks_for(int64_t n) {
  return unsigned(
      std::min<int64_t>(std::max<int64_t>((n + kThreads - 1) / kThreads, 1), kMaxBlocks));
}

// 16-byte stores of `pattern` over vectors [0, n_vec).
__global__ void fill_vector_kernel(uint4* __restrict__ dst, int64_t n_vec, uint4 pattern) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n_vec; i += stride)
    dst[i] = pattern;
}

template <class Word>
__global__ void fill_strided_kernel(Word* __restrict__ dst, int64_t n, Layout layout, Word bits) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[strided_offset(layout, i)] = bits;
}

template <class T>
__global__ void arange_kernel(T* __restrict__ dst, int64_t n, double start, double step) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const double v = start + double(i) * step;
    if constexpr (element::is_half_v<T>) {
      dst[i] = T(float(v));
    } else {
      dst[i] = static_cast<T>(v);
    }
  }
}

// The element bits of `value` in dtype `T`, zero-extended to 64 bits.
template <class T>
uint64_t element_bits(double value) {
  const T v = element::convert<T>(value);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}

template <class Word>
void fill_words(const Tensor& dst, uint64_t bits, cudaStream_t stream) {
  const int64_t n = dst.numel();
  Word* p = static_cast<Word*>(dst.data_ptr("fill"));
  const Word word = Word(bits);
  int64_t head = 0;  // elements done by vector stores
  if (dst.is_contiguous() && reinterpret_cast<uintptr_t>(p) % 16 == 0) {
    const int64_t per_vec = int64_t(16 / sizeof(Word));
    const int64_t n_vec = n / per_vec;
    if (n_vec > 0) {
      uint4 pattern;
      Word words[16 / sizeof(Word)];
      for (auto& w : words) w = word;
      std::memcpy(&pattern, words, sizeof pattern);
      launch(fill_vector_kernel, LaunchConfig{blocks_for(n_vec), kThreads, 0, stream, "fill"},
             reinterpret_cast<uint4*>(p), n_vec, pattern);
      head = n_vec * per_vec;
    }
  }
  if (head == n) return;
  if (head > 0) {
    // The contiguous tail, as a 1-d layout.
    Layout tail{1, {n - head}, {1}};
    launch(fill_strided_kernel<Word>,
           LaunchConfig{blocks_for(n - head), kThreads, 0, stream, "fill"}, p + head, n - head,
           tail, word);
    return;
  }
  launch(fill_strided_kernel<Word>, LaunchConfig{blocks_for(n), kThreads, 0, stream, "fill"}, p, n,
         layout_of(dst), word);
}

}  // namespace

void fill(const Tensor& dst, double value, cudaStream_t stream) {
  if (dst.numel() == 0) return;
  switch (dst.dtype()) {
    case DType::f32:
      return fill_words<uint32_t>(dst, element_bits<float>(value), stream);
    case DType::f64:
      return fill_words<uint64_t>(dst, element_bits<double>(value), stream);
    case DType::bf16:
      return fill_words<uint16_t>(dst, element_bits<BFloat16>(value), stream);
    case DType::f16:
      return fill_words<uint16_t>(dst, element_bits<Half>(value), stream);
    case DType::i32:
      return fill_words<uint32_t>(dst, element_bits<int32_t>(value), stream);
    case DType::i64:
      return fill_words<uint64_t>(dst, element_bits<int64_t>(value), stream);
  }
  detail::throw_error("fill: unsupported dtype in ", dst.describe());
}

namespace {
template <class T>
void arange_typed(const Tensor& dst, double start, double step, cudaStream_t stream) {
  const int64_t n = dst.numel();
  launch(arange_kernel<T>, LaunchConfig{blocks_for(n), kThreads, 0, stream, "arange"},
         static_cast<T*>(dst.data_ptr("arange")), n, start, step);
}
}  // namespace

void arange(const Tensor& dst, double start, double step, cudaStream_t stream) {
  TESSERA_CHECK(dst.dim() == 1 && dst.is_contiguous(),
                "arange: the cuda kernel writes a "
                "contiguous 1-d tensor, got ",
                dst.describe());
  if (dst.numel() == 0) return;
  switch (dst.dtype()) {
    case DType::f32:
      return arange_typed<float>(dst, start, step, stream);
    case DType::f64:
      return arange_typed<double>(dst, start, step, stream);
    case DType::bf16:
      return arange_typed<BFloat16>(dst, start, step, stream);
    case DType::f16:
      return arange_typed<Half>(dst, start, step, stream);
    case DType::i32:
      return arange_typed<int32_t>(dst, start, step, stream);
    case DType::i64:
      return arange_typed<int64_t>(dst, start, step, stream);
  }
  detail::throw_error("arange: unsupported dtype in ", dst.describe());
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
