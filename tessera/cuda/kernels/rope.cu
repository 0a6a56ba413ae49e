// Rotary position embedding over [B, T, H, D]. Memory-bound: one read and one write per
// element. As on the CPU, angles (pos_offset + t) * theta^(-2d/D) reach ~1e4 rad at long
// contexts, where an f32 argument alone is off by ~1e-3 rad; so a first kernel evaluates cos and
// sin in f64 once per (t, d) into a [T, 2, D/2] table in the compute type (O(T * D), shared by
// every batch row and head; the f64 work is negligible next to the main pass). The main kernel
// gives each thread one pair (d, d + D/2) of one row (b, t, h): consecutive threads take
// consecutive d, so both half-row loads and stores coalesce. The rotation is computed in the
// compute type like the CPU's; nvcc may contract x1 * c - x2 * s into an FMA, which differs
// from the CPU by at most one rounding (one ulp of the larger product).

#include "tessera/cuda/kernels/rope.h"

#include <type_traits>

#include "tessera/cuda/kernels/scratch.h"
#include "tessera/cuda/kernels/vector_io.h"

namespace tessera::cuda {
inline namespace TESSERA_CUDA_ABI {
namespace {

constexpr int kThreads = 256;

// table[t * D + d] = cos, table[t * D + half + d] = sign * sin, for d < half.
template <class A>
__global__ void rope_table_kernel(A* __restrict__ table, int64_t T, int64_t D, int64_t pos_offset,
                                  double theta, double sign) {
  const int64_t half = D / 2;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < T * half;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = e / half, d = e % half;
    const double inv_freq = math_pow(theta, -2.0 * double(d) / double(D));
    const double angle = double(pos_offset + t) * inv_freq;
    table[t * D + d] = A(math_cos(angle));
    table[t * D + half + d] = A(sign * math_sin(angle));
  }
}

struct RopeLayout {
  int64_t T, H, half;
  int64_t xb, xt, xh;  // x strides of b, t, h (d has unit stride)
  int64_t ob, ot, oh;
};

// No __restrict__ on x and out: out may be x. Each thread reads its pair before writing it.
template <class T>
__global__ void rope_kernel(const T* x, T* out, const acc_t<T>* __restrict__ table, RopeLayout l,
                            int64_t pairs) {
  using A = acc_t<T>;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < pairs;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t d = e % l.half, row = e / l.half;
    const int64_t h = row % l.H, t = (row / l.H) % l.T, b = row / (l.H * l.T);
    const T* in = x + b * l.xb + t * l.xt + h * l.xh;
    T* o = out + b * l.ob + t * l.ot + h * l.oh;
    const A c = table[t * 2 * l.half + d], s = table[t * 2 * l.half + l.half + d];
    const A x1 = load_acc(in + d), x2 = load_acc(in + l.half + d);
    o[d] = convert<T>(x1 * c - x2 * s);
    o[l.half + d] = convert<T>(x2 * c + x1 * s);
  }
}

}  // namespace

void rope(const Tensor& x, const Tensor& out, int64_t pos_offset, double theta, bool inverse,
          cudaStream_t stream) {
  const char* op = inverse ? "rope (inverse)" : "rope";
  TESSERA_CHECK(x.dim() == 4 && out.shape() == x.shape() && out.dtype() == x.dtype() &&
                    is_floating(x.dtype()) && x.size(3) % 2 == 0 &&
                    (x.size(3) <= 1 || (x.stride(3) == 1 && out.stride(3) == 1)),
                "cuda ", op,
                ": needs floating x and out [B, T, H, D] of one dtype with even D "
                "and unit stride in D, got x ",
                x.describe(), " strides ", x.strides(), ", out ", out.describe(), " strides ",
                out.strides());
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3), half = D / 2;
  const int64_t pairs = B * T * H * half;
  if (pairs == 0) return;
  dispatch_device(x.dtype(), [&](auto* tag) {
    using S = std::remove_pointer_t<decltype(tag)>;
    if constexpr (!std::is_integral_v<S>) {
      using A = acc_t<S>;
      DeviceScratch<A> table(size_t(T * D), stream, op);
      launch(rope_table_kernel<A>,
             LaunchConfig{dim3(grid_blocks(T * half, kThreads)), dim3(kThreads), 0, stream, op},
             table.data(), T, D, pos_offset, theta, inverse ? -1.0 : 1.0);
      const RopeLayout l{T,
                         H,
                         half,
                         x.stride(0),
                         x.stride(1),
                         x.stride(2),
                         out.stride(0),
                         out.stride(1),
                         out.stride(2)};
      launch(rope_kernel<S>,
             LaunchConfig{dim3(grid_blocks(pairs, kThreads)), dim3(kThreads), 0, stream, op},
             static_cast<const S*>(x.data_ptr(op)), static_cast<S*>(out.data_ptr(op)), table.data(),
             l, pairs);
    }
  });
}

}  // namespace TESSERA_CUDA_ABI
}  // namespace tessera::cuda
