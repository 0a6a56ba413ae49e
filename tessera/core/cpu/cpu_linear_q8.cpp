// The Q8_0 linear on the CPU. Threads split the output rows n. A block of 32 int8 weights is
// turned into floats (d·q, d the block's f16 scale) and multiplied into 32 running lanes per
// output, which stay in registers: four independent FMA chains per output. Two shapes of pass:
//   batch 1 (and one row left over): one row of x against 4 weight rows at once, 4 streams from
//     memory, the row of x in L1. Memory-bound: 34 bytes per 32 weights against 128 in f32.
//   kRows (8, or 4 without AVX-512) rows of x at once: each block converted once for all of
//     them, the weight row in L1. Compute-bound at 0.55-0.75x the f32 GEMM (no packing,
//     conversions in the inner loop). The 2 to kRows - 1 rows left (decode batches) take one
//     pass of their own, the block converted once for all of them, rather than one pass each.
// Measured on the 2-core CPU (docs/benchmarks.md): 1.6-2.6x the f32 GEMV at batch 1, and a
// whole GPT-2-small decode step 1.28x the tokens/s of f32 at batch 1, 1.0x at batch 16.
//
// Order: for each (m, n), lane i sums (d·q[k])·x[k] over k = i mod 32 in k order; the 32 lanes
// are then added in a fixed tree. Every output sees the same operations in either pass, so the
// result depends neither on the thread count nor on M (tests/ops/quantized_linear_cases.cpp).

#include <vector>

#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/f16_scales.h"
#include "tessera/core/cpu/parallel.h"
#include "tessera/core/detail/element_convert.h"

namespace tessera {

namespace {

constexpr int64_t kBlock = 32;
// Rows of x per pass over a weight row: their 32 lanes each stay in registers, 8 rows in
// AVX-512's 32 registers of 16 (1.3x the speed of 4 at M = 16 on the Xeon), 4 rows in AVX2's 16
// of 8 (8 rows' lanes would take 32 of them: on the EPYC a decode step of 8 sequences took
// 40.8 ms in passes of 8 and 35.5 ms in passes of 4, separate runs).
#if defined(__AVX512F__)
constexpr int kRows = 8;
#else
constexpr int kRows = 4;
#endif
constexpr int kCols = 4;  // weight rows per pass at batch 1

// R x C outputs: C consecutive Q8_0 rows (q, stride K; their scales as floats, stride
// `blocks`) dotted with R rows of x (stride K), in the order the header states. Each block is
// converted once for the R rows, and C rows are C independent streams from memory (at M = 1,
// C = 4 reads 1.5x faster than one row at a time). Every output's lanes see the same
// operations whatever R and C are, so the bits depend on neither.
template <int R, int C, class A>
void dot_q8(const int8_t* q, const float* scale, const A* x, int64_t K, int64_t blocks,
            A out[R][C]) {
  A lane[C][R][kBlock] = {};
  A w[C][kBlock];
  for (int64_t b = 0; b < blocks; ++b) {
    for (int c = 0; c < C; ++c) {
      const A d = A(scale[c * blocks + b]);
      const int8_t* qb = q + c * K + b * kBlock;
      for (int64_t i = 0; i < kBlock; ++i) w[c][i] = d * A(qb[i]);
    }
    for (int r = 0; r < R; ++r) {
      const A* xb = x + r * K + b * kBlock;
      for (int c = 0; c < C; ++c)
        for (int64_t i = 0; i < kBlock; ++i) lane[c][r][i] += w[c][i] * xb[i];
    }
  }
  // The tree, one constant-width level at a time so that each level is vector adds.
  for (int c = 0; c < C; ++c)
    for (int r = 0; r < R; ++r) {
      A* l = lane[c][r];
      for (int64_t i = 0; i < 16; ++i) l[i] += l[i + 16];
      for (int64_t i = 0; i < 8; ++i) l[i] += l[i + 8];
      for (int64_t i = 0; i < 4; ++i) l[i] += l[i + 4];
      for (int64_t i = 0; i < 2; ++i) l[i] += l[i + 2];
      out[r][c] = l[0] + l[1];
    }
}

// R rows of x against one weight row, into y[0], y[stride], ...; R = rows at run time (2 to
// kRows - 1: the rows left after the full passes, each block converted once for all of them).
template <int R, class A>
void rows_pass(const int8_t* q, const float* scale, const A* x, int64_t K, int64_t blocks, A* y,
               int64_t stride) {
  A col[R][1];
  dot_q8<R, 1>(q, scale, x, K, blocks, col);
  for (int r = 0; r < R; ++r) y[r * stride] = col[r][0];
}

// The pass for `rows` rows, 2 <= rows < kRows (only those sizes are instantiated).
template <class A, int R = 2>
void rows_left(int64_t rows, const int8_t* q, const float* scale, const A* x, int64_t K,
               int64_t blocks, A* y, int64_t stride) {
  if constexpr (R < kRows) {
    if (rows == R) return rows_pass<R>(q, scale, x, K, blocks, y, stride);
    rows_left<A, R + 1>(rows, q, scale, x, K, blocks, y, stride);
  }
}

}  // namespace

void CpuBackend::linear_q8(const Tensor& x, const Tensor& q8, const Tensor& scale,
                           const Tensor& bias, const Tensor& out) {
  const char* op = "linear_q8";
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
                        std::vector<float> scales(static_cast<size_t>(kCols * blocks));
                        for (int64_t n = lo; n < hi; n += kCols) {
                          const int64_t cols = std::min<int64_t>(kCols, hi - n);
                          cpu::scales_to_float(s + n * blocks, cols * blocks, scales.data());
                          const int8_t* qn = q + n * K;
                          const float* sn = scales.data();
                          const int64_t stride = kCols;  // of y's rows
                          A y[kRows * kCols];
                          // y's rows x [c0, c1) -> out rows m.., columns n + c0..
                          auto store = [&](int64_t m, int64_t rows, int64_t c0, int64_t c1) {
                            for (int64_t r = 0; r < rows; ++r)
                              for (int64_t c = c0; c < c1; ++c)
                                o[(m + r) * N + n + c] = element::convert<T>(
                                    y[r * stride + c - c0] +
                                    (bp ? A(element::load(bp + n + c)) : A(0)));
                          };
                          int64_t m = 0;
                          for (; m + kRows <= M; m += kRows)  // prefill, large decode batches
                            for (int64_t c = 0; c < cols; ++c) {
                              A col[kRows][1];
                              dot_q8<kRows, 1>(qn + c * K, sn + c * blocks, xa.data() + m * K, K,
                                               blocks, col);
                              for (int64_t r = 0; r < kRows; ++r) y[r * stride] = col[r][0];
                              store(m, kRows, c, c + 1);
                            }
                          if (M - m >= 2) {  // 2 to kRows - 1 rows left: decode batches
                            for (int64_t c = 0; c < cols; ++c) {
                              rows_left(M - m, qn + c * K, sn + c * blocks, xa.data() + m * K, K,
                                        blocks, y, stride);
                              store(m, M - m, c, c + 1);
                            }
                            m = M;
                          }
                          for (; m < M; ++m) {  // batch 1
                            if (cols == kCols) {
                              dot_q8<1, kCols>(qn, sn, xa.data() + m * K, K, blocks,
                                               reinterpret_cast<A(*)[kCols]>(y));
                              store(m, 1, 0, kCols);
                              continue;
                            }
                            for (int64_t c = 0; c < cols; ++c) {
                              A one[1][1];
                              dot_q8<1, 1>(qn + c * K, sn + c * blocks, xa.data() + m * K, K,
                                           blocks, one);
                              y[0] = one[0][0];
                              store(m, 1, c, c + 1);
                            }
                          }
                        }
                      });
  });
}

}  // namespace tessera
