// Embedding: a row gather (forward) and a deterministic scatter-add of gradient rows
// (backward). Both memory-bound.
//
// Forward: one thread per 16-byte piece of an output row (or per element when rows are not
// 16-byte aligned), raw copies, coalesced along C.
//
// Backward, without float atomics: the keys id * 2^32 + position (unique, so any correct sort
// orders them the same way) are sorted by a bitonic network in global memory: log2(P) (log2(P)
// + 1) / 2 compare-exchange passes over P = N rounded up to a power of two, about 105 launches
// of N threads for N = 16k tokens (~0.3 ms, launch-bound), O(N log^2 N) work. Then one block
// per vocabulary row binary-searches its run of keys (rows no id names exit at once) and each
// thread owns columns of that row, adding the gy rows in position order onto gweight's value:
// the CPU backend's order, so the bits match it. A row named k times costs one block k row
// reads; a very frequent id (padding) serialises on its block.
//
// Ids outside [0, V) are found by a flag kernel (integer atomicMin of the position: exact) and
// reported after reading the flag back; gather writes zeros for them and the sort pushes them
// past every row, so no kernel touches memory out of bounds.

#include "tessera/cuda/kernels/embedding.h"

#include <cstring>
#include <type_traits>

#include "tessera/cuda/kernels/scratch.h"
#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kThreads = 256;
constexpr unsigned long long kNone = ~0ull;

// ---- id validation ----
template <class I>
__global__ void first_bad_id_kernel(const I* __restrict__ ids, int64_t n, int64_t v,
                                    unsigned long long* __restrict__ first) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = int64_t(ids[i]);
    if (id < 0 || id >= v) atomicMin(first, static_cast<unsigned long long>(i));
  }
}

__global__ void set_kernel(unsigned long long* p, unsigned long long value) {
  *p = value;
}

// Copies `bytes` from device memory to the host, waiting for the stream.
void read_back(void* host, const void* device, size_t bytes, cudaStream_t stream, const char* op) {
#if defined(__CUDACC__)
  cudaError_t status = cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream);
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  TESSERA_CHECK(status == cudaSuccess, op,
                ": cannot read the id check back from the device: ", cudaGetErrorString(status));
#else
  (void)op;
  sim::drain(stream);                // the stream's queued work first (sim/streams.h)
  std::memcpy(host, device, bytes);  // simulated device memory is host memory
#endif
}

// Throws as the CPU backend does for the first id outside [0, v).
template <class I>
void check_ids(const I* ids, int64_t n, int64_t v, cudaStream_t stream, const char* op) {
  DeviceScratch<unsigned long long> first(1, stream, op);
  launch(set_kernel, LaunchConfig{dim3(1), dim3(1), 0, stream, op}, first.data(), kNone);
  launch(first_bad_id_kernel<I>,
         LaunchConfig{dim3(grid_blocks(n, kThreads)), dim3(kThreads), 0, stream, op}, ids, n, v,
         first.data());
  unsigned long long position = kNone;
  read_back(&position, first.data(), sizeof(position), stream, op);
  if (position == kNone) return;
  I id{};
  read_back(&id, ids + position, sizeof(I), stream, op);
  TESSERA_CHECK(false, op, ": id ", int64_t(id), " at flat position ", position, " is outside [0, ",
                v, "), the rows of the weight");
}

// ---- forward ----
// U is the copy unit: uint4 (16 bytes of a row) or the element's raw bits.
template <class U, class I>
__global__ void gather_kernel(const U* __restrict__ weight, const I* __restrict__ ids,
                              U* __restrict__ out, int64_t n, int64_t units, int64_t v) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n * units;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / units, col = e % units;
    const int64_t id = int64_t(ids[row]);
    out[e] = id >= 0 && id < v ? weight[id * units + col] : U{};
  }
}

// ---- backward ----
template <class I>
__global__ void make_keys_kernel(const I* __restrict__ ids, int64_t n, int64_t v, int64_t padded,
                                 unsigned long long* __restrict__ keys) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < padded;
       i += int64_t(gridDim.x) * blockDim.x) {
    unsigned long long key = kNone;  // padding and bad ids sort after every row
    if (i < n) {
      const int64_t id = int64_t(ids[i]);
      if (id >= 0 && id < v) key = (static_cast<unsigned long long>(id) << 32) | uint64_t(i);
    }
    keys[i] = key;
  }
}

// One compare-exchange pass of the bitonic network: stage k (sequence size), distance j.
__global__ void bitonic_pass_kernel(unsigned long long* __restrict__ keys, int64_t padded,
                                    int64_t k, int64_t j) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < padded;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t l = i ^ j;
    if (l <= i) continue;
    const unsigned long long a = keys[i], b = keys[l];
    const bool ascending = (i & k) == 0;
    if ((a > b) == ascending) {
      keys[i] = b;
      keys[l] = a;
    }
  }
}

// First index in sorted keys[0, n) whose key is >= `key`.
__device__ __forceinline__ int64_t lower_bound(const unsigned long long* keys, int64_t n,
                                               unsigned long long key) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (keys[mid] < key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Block r (grid-stride over rows) adds the gy rows of id r, in position order, onto gweight[r].
template <class T>
__global__ void scatter_rows_kernel(const unsigned long long* __restrict__ keys, int64_t n,
                                    const T* __restrict__ gy, T* __restrict__ gweight, int64_t v,
                                    int64_t c) {
  using A = acc_t<T>;
  for (int64_t r = blockIdx.x; r < v; r += gridDim.x) {
    const unsigned long long first_key = static_cast<unsigned long long>(r) << 32;
    const int64_t begin = lower_bound(keys, n, first_key);
    const int64_t end = lower_bound(keys, n, first_key + (1ull << 32));
    if (begin == end) continue;  // the whole block agrees: no id names row r
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      A acc = load_acc(gweight + r * c + j);
      for (int64_t s = begin; s < end; ++s) {
        const int64_t position = int64_t(keys[s] & 0xffffffffull);
        acc += load_acc(gy + position * c + j);
      }
      gweight[r * c + j] = convert<T>(acc);
    }
  }
}

template <class F>
void dispatch_ids(const Tensor& ids, const char* op, F&& f) {
  TESSERA_CHECK(ids.dtype() == DType::i32 || ids.dtype() == DType::i64, "cuda ", op,
                ": ids must be i32 or i64, got ", ids.describe());
  if (ids.dtype() == DType::i32) {
    f(static_cast<const int32_t*>(ids.data_ptr(op)));
  } else {
    f(static_cast<const int64_t*>(ids.data_ptr(op)));
  }
}

template <int kBytes>
struct RawOf;
template <>
struct RawOf<2> {
  using type = unsigned short;
};
template <>
struct RawOf<4> {
  using type = unsigned int;
};
template <>
struct RawOf<8> {
  using type = unsigned long long;
};

}  // namespace

void embedding_forward(const Tensor& weight, const Tensor& ids, const Tensor& out,
                       cudaStream_t stream) {
  const char* op = "embedding";
  TESSERA_CHECK(weight.dim() == 2 && weight.is_contiguous() && ids.dim() == 1 &&
                    ids.is_contiguous() && out.is_contiguous() && out.dtype() == weight.dtype() &&
                    out.shape() == Shape({ids.size(0), weight.size(1)}),
                "cuda embedding: needs contiguous weight [V, C], ids [N] and out [N, C] of "
                "weight's dtype, got weight ",
                weight.describe(), ", ids ", ids.describe(), ", out ", out.describe());
  const int64_t v = weight.size(0), c = weight.size(1), n = ids.size(0);
  if (n == 0) return;
  dispatch_ids(ids, op, [&](auto* id_ptr) {
    using I = std::remove_const_t<std::remove_pointer_t<decltype(id_ptr)>>;
    check_ids<I>(id_ptr, n, v, stream, op);
    if (c == 0) return;
    const void* w = weight.data_ptr(op);
    void* o = out.data_ptr(op);
    const int64_t row_bytes = c * int64_t(weight.itemsize());
    auto run = [&](auto* unit_tag, int64_t units) {
      using U = std::remove_pointer_t<decltype(unit_tag)>;
      launch(gather_kernel<U, I>,
             LaunchConfig{dim3(grid_blocks(n * units, kThreads)), dim3(kThreads), 0, stream, op},
             static_cast<const U*>(w), id_ptr, static_cast<U*>(o), n, units, v);
    };
    if (row_bytes % 16 == 0 && is_aligned16(w) && is_aligned16(o)) {
      run(static_cast<uint4*>(nullptr), row_bytes / 16);
    } else if (weight.itemsize() == 2) {
      run(static_cast<RawOf<2>::type*>(nullptr), c);
    } else if (weight.itemsize() == 4) {
      run(static_cast<RawOf<4>::type*>(nullptr), c);
    } else {
      run(static_cast<RawOf<8>::type*>(nullptr), c);
    }
  });
}

void embedding_backward(const Tensor& ids, const Tensor& gy, const Tensor& gweight,
                        cudaStream_t stream) {
  const char* op = "embedding_backward";
  TESSERA_CHECK(gweight.dim() == 2 && gweight.is_contiguous() && ids.dim() == 1 &&
                    ids.is_contiguous() && gy.is_contiguous() && gy.dtype() == gweight.dtype() &&
                    is_floating(gy.dtype()) && gy.shape() == Shape({ids.size(0), gweight.size(1)}),
                "cuda embedding_backward: needs contiguous floating gweight [V, C], gy [N, C] of "
                "its dtype and ids [N], got ids ",
                ids.describe(), ", gy ", gy.describe(), ", gweight ", gweight.describe());
  const int64_t v = gweight.size(0), c = gweight.size(1), n = ids.size(0);
  TESSERA_CHECK(n < (int64_t(1) << 32), "cuda embedding_backward: ", n,
                " ids exceed the 2^32 positions a sort key holds");
  if (n == 0) return;
  dispatch_ids(ids, op, [&](auto* id_ptr) {
    using I = std::remove_const_t<std::remove_pointer_t<decltype(id_ptr)>>;
    check_ids<I>(id_ptr, n, v, stream, op);
    if (c == 0) return;
    int64_t padded = 1;
    while (padded < n) padded *= 2;
    DeviceScratch<unsigned long long> keys(size_t(padded), stream, op);
    const LaunchConfig over_keys{dim3(grid_blocks(padded, kThreads)), dim3(kThreads), 0, stream,
                                 op};
    launch(make_keys_kernel<I>, over_keys, id_ptr, n, v, padded, keys.data());
    for (int64_t k = 2; k <= padded; k *= 2)
      for (int64_t j = k / 2; j > 0; j /= 2)
        launch(bitonic_pass_kernel, over_keys, keys.data(), padded, k, j);
    dispatch_device(gy.dtype(), [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      if constexpr (!std::is_integral_v<T>) {
        const int threads = c >= kThreads ? kThreads : int((c + 31) / 32 * 32);
        launch(scatter_rows_kernel<T>,
               LaunchConfig{dim3(unsigned(v < 65535 ? v : 65535)), dim3(unsigned(threads)), 0,
                            stream, op},
               keys.data(), n, static_cast<const T*>(gy.data_ptr(op)),
               static_cast<T*>(gweight.data_ptr(op)), v, c);
      }
    });
  });
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
