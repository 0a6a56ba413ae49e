// Reductions over [outer, r, inner] and max's backward (the global squared norm is in
// squared_norm.cu). All are memory-bound (one read of x); the work is in keeping every SM busy
// and the loads coalesced.
//
//   inner == 1, many rows:   one warp per row (r <= kWarpRowMax) or one block per row, lanes
//                            striding the row (coalesced), then shuffles.
//   inner == 1, few long rows: each row split into a fixed number of chunks (a function of r
//                            only), one block per chunk writing a partial, then one warp per
//                            row combines the partials in chunk order.
//   inner > 1:               block (32, 8): x over inner (coalesced), y interleaves r; the 8
//                            partials meet in shared memory and are combined in y order.
// Every tree is fixed by the shapes alone, so results are bit-identical from run to run (no
// float atomics). max keeps the first maximal index; a NaN beats everything at its first
// position, as on the CPU.

#include "tessera/cuda/kernels/reduce.h"

#include <algorithm>
#include <type_traits>

#include "tessera/cuda/kernels/scratch.h"
#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kWarpRowMax = 1024;  // longer rows get a whole block
constexpr int64_t kSplitMinR = 16384;  // rows at least this long may be split across blocks
constexpr int64_t kSplitChunk = 8192;  // elements per split chunk (a function of r only)
constexpr int64_t kMaxSplits = 1024;
constexpr int kInnerY = 8;  // r-interleave of the inner > 1 kernel

// A running reduction: sum, or (max, first argmax).
template <ReduceOp kOp, class A>
struct Acc {
  A v;
  int64_t i;
};

template <ReduceOp kOp, class A>
__device__ __forceinline__ Acc<kOp, A> acc_init() {
  return {A(0), int64_t(-1)};
}

// Whether (bv, bi) should replace (av, ai): the larger value, the smaller index among equal
// values, and NaN over everything (the first NaN among NaNs). ai == -1 is empty.
template <class A>
__device__ __forceinline__ bool max_better(A av, int64_t ai, A bv, int64_t bi) {
  if (bi < 0) return false;
  if (ai < 0) return true;
  const bool an = math_isnan(av), bn = math_isnan(bv);
  if (an || bn) return bn && (!an || bi < ai);
  return bv > av || (bv == av && bi < ai);
}

template <ReduceOp kOp, class A>
__device__ __forceinline__ void acc_add(Acc<kOp, A>& a, A v, int64_t k) {
  if constexpr (kOp == ReduceOp::max) {
    if (max_better(a.v, a.i, v, k)) {
      a.v = v;
      a.i = k;
    }
  } else {
    a.v += v;
  }
}

template <ReduceOp kOp, class A>
__device__ __forceinline__ void acc_merge(Acc<kOp, A>& a, const Acc<kOp, A>& b) {
  if constexpr (kOp == ReduceOp::max) {
    if (max_better(a.v, a.i, b.v, b.i)) a = b;
  } else {
    a.v += b.v;
  }
}

template <ReduceOp kOp, class A>
__device__ __forceinline__ Acc<kOp, A> warp_reduce(Acc<kOp, A> a) {
  for (int offset = 16; offset > 0; offset /= 2) {
    Acc<kOp, A> other;
    other.v = __shfl_xor_sync(kFullMask, a.v, offset);
    if constexpr (kOp == ReduceOp::max) {
      other.i =
          static_cast<int64_t>(__shfl_xor_sync(kFullMask, static_cast<long long>(a.i), offset));
    }
    acc_merge(a, other);
  }
  return a;
}

template <ReduceOp kOp, class A, class T>
__device__ __forceinline__ void acc_store(const Acc<kOp, A>& a, int64_t r, T* out, int64_t* indices,
                                          int64_t slot) {
  if constexpr (kOp == ReduceOp::max) {
    out[slot] = convert<T>(a.v);
    indices[slot] = a.i;
  } else if constexpr (kOp == ReduceOp::mean) {
    out[slot] = convert<T>(a.v / A(r));
  } else {
    out[slot] = convert<T>(a.v);
  }
}

// ---- inner == 1 ----
template <ReduceOp kOp, class T>
__global__ void reduce_rows_warp_kernel(const T* __restrict__ x, int64_t rows, int64_t r,
                                        T* __restrict__ out, int64_t* __restrict__ indices) {
  using A = acc_t<T>;
  const int lane = int(threadIdx.x) % warpSize;
  const int64_t warps_per_block = blockDim.x / warpSize;
  for (int64_t row = int64_t(blockIdx.x) * warps_per_block + threadIdx.x / warpSize; row < rows;
       row += int64_t(gridDim.x) * warps_per_block) {
    const T* xr = x + row * r;
    Acc<kOp, A> a = acc_init<kOp, A>();
    for (int64_t k = lane; k < r; k += warpSize) acc_add(a, load_acc(xr + k), k);
    a = warp_reduce(a);
    if (lane == 0) acc_store(a, r, out, indices, row);
  }
}

// Blocks (c, y) take rows y, y + gridDim.y, ... of [rows, r]; block c covers the chunk
// [c * chunk, min(r, (c + 1) * chunk)) of each (the whole row when chunk = r) and writes the
// result, or partial slot row * gridDim.x + c when the row is split.
template <ReduceOp kOp, class T>
__global__ void reduce_rows_block_kernel(const T* __restrict__ x, int64_t rows, int64_t r,
                                         int64_t chunk, acc_t<T>* __restrict__ part_v,
                                         int64_t* __restrict__ part_i, T* __restrict__ out,
                                         int64_t* __restrict__ indices) {
  using A = acc_t<T>;
  TESSERA_SHARED(A, scratch_v, 32);
  TESSERA_SHARED(int64_t, scratch_i, 32);
  const int64_t begin = int64_t(blockIdx.x) * chunk;
  const int64_t end = begin + chunk < r ? begin + chunk : r;
  const unsigned lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const T* xr = x + row * r;
    Acc<kOp, A> a = acc_init<kOp, A>();
    for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) acc_add(a, load_acc(xr + k), k);
    a = warp_reduce(a);
    if (lane == 0) {
      scratch_v[warp] = a.v;
      scratch_i[warp] = a.i;
    }
    __syncthreads();
    if (warp == 0) {
      a = acc_init<kOp, A>();
      if (lane < blockDim.x / warpSize) {
        a.v = A(scratch_v[lane]);
        a.i = int64_t(scratch_i[lane]);
      }
      a = warp_reduce(a);
      if (lane == 0 && part_v != nullptr) {
        const int64_t slot = row * gridDim.x + blockIdx.x;
        part_v[slot] = a.v;
        part_i[slot] = a.i;
      } else if (lane == 0) {
        acc_store(a, r, out, indices, row);
      }
    }
    __syncthreads();  // scratch is written again for the next row
  }
}

// Combines `splits` partials per row in chunk order (one warp per row).
template <ReduceOp kOp, class T>
__global__ void reduce_partials_kernel(const acc_t<T>* __restrict__ part_v,
                                       const int64_t* __restrict__ part_i, int64_t rows,
                                       int64_t splits, int64_t r, T* __restrict__ out,
                                       int64_t* __restrict__ indices) {
  using A = acc_t<T>;
  const int lane = int(threadIdx.x) % warpSize;
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / warpSize) + threadIdx.x / warpSize;
  if (row >= rows) return;  // the whole warp leaves together
  Acc<kOp, A> a = acc_init<kOp, A>();
  for (int64_t c = lane; c < splits; c += warpSize)
    acc_merge(a, Acc<kOp, A>{A(part_v[row * splits + c]), int64_t(part_i[row * splits + c])});
  a = warp_reduce(a);
  if (lane == 0) acc_store(a, r, out, indices, row);
}

// ---- inner > 1: block (32, kInnerY), grid (ceil(inner / 32), min(outer, 65535)) ----
template <ReduceOp kOp, class T>
__global__ void reduce_inner_kernel(const T* __restrict__ x, int64_t outer, int64_t r,
                                    int64_t inner, T* __restrict__ out,
                                    int64_t* __restrict__ indices) {
  using A = acc_t<T>;
  TESSERA_SHARED(A, part_v, 32 * kInnerY);
  TESSERA_SHARED(int64_t, part_i, 32 * kInnerY);
  const int64_t i = int64_t(blockIdx.x) * 32 + threadIdx.x;
  const int slot = int(threadIdx.y) * 32 + int(threadIdx.x);
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    Acc<kOp, A> a = acc_init<kOp, A>();
    if (i < inner) {
      const T* base = x + o * r * inner + i;
      for (int64_t k = threadIdx.y; k < r; k += kInnerY) acc_add(a, load_acc(base + k * inner), k);
    }
    part_v[slot] = a.v;
    part_i[slot] = a.i;
    __syncthreads();
    if (threadIdx.y == 0 && i < inner) {
      for (int y = 1; y < kInnerY; ++y)
        acc_merge(a, Acc<kOp, A>{A(part_v[y * 32 + int(threadIdx.x)]),
                                 int64_t(part_i[y * 32 + int(threadIdx.x)])});
      acc_store(a, r, out, indices, o * inner + i);
    }
    __syncthreads();  // part_* is reused by the next o
  }
}

// ---- max backward: one thread per gx element ----
template <class T, class Index>
__global__ void max_backward_kernel(const int64_t* __restrict__ indices, const T* __restrict__ gy,
                                    T* __restrict__ gx, Index r, Index inner, Index n) {
  for (Index e = Index(int64_t(blockIdx.x) * blockDim.x + threadIdx.x); e < n;
       e += Index(int64_t(gridDim.x) * blockDim.x)) {
    const Index i = e % inner, ok = e / inner;
    const Index k = ok % r, o = ok / r;
    const Index slot = o * inner + i;
    gx[e] = indices[slot] == int64_t(k) ? gy[slot] : convert<T>(acc_t<T>(0));
  }
}

// ---- host side ----
template <class F>
void dispatch_reduce(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::sum:
      return f.template operator()<ReduceOp::sum>();
    case ReduceOp::mean:
      return f.template operator()<ReduceOp::mean>();
    case ReduceOp::max:
      return f.template operator()<ReduceOp::max>();
  }
}

template <ReduceOp kOp, class T>
void launch_rows(const T* x, int64_t rows, int64_t r, T* out, int64_t* indices, cudaStream_t stream,
                 const char* name) {
  using A = acc_t<T>;
  const bool split = r >= kSplitMinR && rows < 64;
  if (r <= kWarpRowMax && !split) {
    const int64_t warps = kThreads / 32;
    const unsigned blocks = unsigned(std::min<int64_t>((rows + warps - 1) / warps, 65535));
    launch(reduce_rows_warp_kernel<kOp, T>,
           LaunchConfig{dim3(blocks), dim3(kThreads), 0, stream, name}, x, rows, r, out, indices);
    return;
  }
  if (!split) {
    const unsigned grid_rows = unsigned(std::min<int64_t>(rows, 65535));
    launch(reduce_rows_block_kernel<kOp, T>,
           LaunchConfig{dim3(1, grid_rows), dim3(kThreads), 0, stream, name}, x, rows, r, r,
           static_cast<A*>(nullptr), static_cast<int64_t*>(nullptr), out, indices);
    return;
  }
  const int64_t splits = std::min((r + kSplitChunk - 1) / kSplitChunk, kMaxSplits);
  const int64_t chunk = (r + splits - 1) / splits;
  DeviceScratch<A> part_v(size_t(rows * splits), stream, name);
  DeviceScratch<int64_t> part_i(size_t(rows * splits), stream, name);
  launch(reduce_rows_block_kernel<kOp, T>,
         LaunchConfig{dim3(unsigned(splits), unsigned(rows)), dim3(kThreads), 0, stream, name}, x,
         rows, r, chunk, part_v.data(), part_i.data(), out, indices);
  const int64_t warps = kThreads / 32;
  launch(reduce_partials_kernel<kOp, T>,
         LaunchConfig{dim3(unsigned((rows + warps - 1) / warps)), dim3(kThreads), 0, stream, name},
         part_v.data(), part_i.data(), rows, splits, r, out, indices);
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, const Tensor& out, const Tensor& indices,
            cudaStream_t stream) {
  const char* name = reduce_op_name(op);
  TESSERA_CHECK(x.dim() == 3 && x.is_contiguous() && out.is_contiguous() &&
                    out.dtype() == x.dtype() && out.numel() == x.size(0) * x.size(2),
                "cuda ", name,
                ": needs contiguous x [outer, r, inner] and out [outer, inner] of "
                "x's dtype, got x ",
                x.describe(), ", out ", out.describe());
  const int64_t outer = x.size(0), r = x.size(1), inner = x.size(2);
  if (op == ReduceOp::max) {
    TESSERA_CHECK(indices.defined() && indices.dtype() == DType::i64 && indices.is_contiguous() &&
                      indices.numel() == out.numel(),
                  "cuda max: needs contiguous i64 indices of out's size, got ", describe(indices),
                  " for out ", out.describe());
    TESSERA_CHECK(r > 0, "cuda max: cannot reduce an empty dim, x ", x.describe());
  }
  if (out.numel() == 0) return;
  dispatch_device(x.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    dispatch_reduce(op, [&]<ReduceOp kOp>() {
      const T* xp = typed<const T>(x, name);
      T* op_ = typed<T>(out, name);
      int64_t* ip = kOp == ReduceOp::max ? typed<int64_t>(indices, name) : nullptr;
      if (inner == 1) {
        launch_rows<kOp, T>(xp, outer, r, op_, ip, stream, name);
        return;
      }
      const dim3 grid(unsigned((inner + 31) / 32), unsigned(std::min<int64_t>(outer, 65535)));
      launch(reduce_inner_kernel<kOp, T>, LaunchConfig{grid, dim3(32, kInnerY), 0, stream, name},
             xp, outer, r, inner, op_, ip);
    });
  });
}

void max_backward(const Tensor& indices, const Tensor& gy, const Tensor& gx, cudaStream_t stream) {
  TESSERA_CHECK(gx.dim() == 3 && gx.is_contiguous() && gy.is_contiguous() &&
                    indices.is_contiguous() && indices.dtype() == DType::i64 &&
                    gy.dtype() == gx.dtype() && is_floating(gx.dtype()) &&
                    gy.numel() == gx.size(0) * gx.size(2) && indices.numel() == gy.numel(),
                "cuda max_backward: needs contiguous floating gx [outer, r, inner], gy and i64 "
                "indices [outer, inner], got indices ",
                indices.describe(), ", gy ", gy.describe(), ", gx ", gx.describe());
  const int64_t r = gx.size(1), inner = gx.size(2), n = gx.numel();
  if (n == 0) return;
  dispatch_device(gx.dtype(), [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!std::is_integral_v<T>) {
      const LaunchConfig config{dim3(grid_blocks(n, kThreads)), dim3(kThreads), 0, stream,
                                "max_backward"};
      const int64_t* ip = typed<const int64_t>(indices, "max_backward");
      const T* gp = typed<const T>(gy, "max_backward");
      T* o = typed<T>(gx, "max_backward");
      if (n < (int64_t(1) << 31)) {
        launch(max_backward_kernel<T, uint32_t>, config, ip, gp, o, uint32_t(r), uint32_t(inner),
               uint32_t(n));
      } else {
        launch(max_backward_kernel<T, int64_t>, config, ip, gp, o, r, inner, n);
      }
    }
  });
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
