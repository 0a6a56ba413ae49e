// The Q8_0 linear on the CPU. For each output row n (threads split the rows), each block of 32
// weights is turned into floats once (d·q) and dotted with the same 32 inputs of every row of
// x, so a decode batch of M tokens reads the weight once. Bound: memory for small M. The
// weight is 34 bytes per 32 elements against 128 in f32, so a memory-bound GEMV reads 3.76x
// fewer bytes; for large M it is compute-bound and slower than the f32 GEMM (no packing).
//
// Order: for each (m, n), blocks in k order; within a block, eight lanes (k mod 8) summed in k
// order, then the lanes in a fixed tree, in the compute type (one AVX register of f32 lanes).
// The result depends neither on the thread count nor on M.

#include <vector>

#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/parallel.h"
#include "tessera/core/detail/element_convert.h"

namespace tessera {

void CpuBackend::linear_q8(const Tensor& x, const Tensor& q8, const Tensor& scale,
                           const Tensor& bias, const Tensor& out) {
  const char* op = "linear_q8";
  constexpr int64_t kBlock = 32, kLanes = 8;
  const int64_t M = x.size(0), K = x.size(1), N = q8.size(0), blocks = K / kBlock;
  const auto* q = reinterpret_cast<const int8_t*>(q8.data<int32_t>(op));
  const Half* s = scale.data<Half>(op);
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    using A = acc_type_t<T>;
    const T* xp = x.data<T>(op);
    const T* bp = bias.defined() ? bias.data<T>(op) : nullptr;
    T* o = out.data<T>(op);
    // x in the compute type, once: every output row reads all of it.
    std::vector<A> xa(static_cast<size_t>(M * K));
    for (int64_t i = 0; i < M * K; ++i) xa[size_t(i)] = element::load(xp + i);
    cpu::parallel_for(N, std::max<int64_t>(1, 4096 / std::max<int64_t>(K, 1)),
                      [&](int64_t lo, int64_t hi) {
                        std::vector<A> acc(static_cast<size_t>(M));
                        A w[kBlock];
                        for (int64_t n = lo; n < hi; ++n) {
                          std::fill(acc.begin(), acc.end(), A(0));
                          const int8_t* qrow = q + n * K;
                          for (int64_t b = 0; b < blocks; ++b) {
                            const A d = A(float(s[n * blocks + b]));
                            for (int64_t i = 0; i < kBlock; ++i) w[i] = d * A(qrow[b * kBlock + i]);
                            for (int64_t m = 0; m < M; ++m) {
                              const A* xr = xa.data() + m * K + b * kBlock;
                              A lane[kLanes] = {};
                              for (int64_t i = 0; i < kBlock; i += kLanes)
                                for (int64_t l = 0; l < kLanes; ++l)
                                  lane[l] += w[i + l] * xr[i + l];
                              acc[size_t(m)] += ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                                                ((lane[4] + lane[5]) + (lane[6] + lane[7]));
                            }
                          }
                          for (int64_t m = 0; m < M; ++m) {
                            const A y = acc[size_t(m)] + (bp ? A(element::load(bp + n)) : A(0));
                            o[m * N + n] = element::convert<T>(y);
                          }
                        }
                      });
  });
}

}  // namespace tessera
