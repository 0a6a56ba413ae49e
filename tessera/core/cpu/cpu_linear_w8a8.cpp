// W8A8 on the CPU: rows of x quantized to int8 with one scale each, then int8 x int8 products
// against Q8_0 weights.
//
// Algorithm. A 32-block of a weight row dotted with the same 32 inputs of a row of x is, with
// AVX2, five instructions on one 32-byte register each: sign(w, x) (w with x's signs), maddubs
// (|x| as unsigned bytes times that, adjacent pairs added into 16 bits: at most 2 * 127 * 127 =
// 32,258, so it never saturates), madd with ones (pairs into 8 int32 lanes of 4 products each,
// exact), a convert, and an FMA by the block's scale into 8 float lanes. The
// weight-only kernel (cpu_linear_q8.cpp) widens the 32 int8 weights to scaled floats (about 20
// vector operations, shared by the up to 4 rows of a pass) and runs 4 FMAs per row: 24
// operations per block at batch 1 against 5 here, 9 per row against 5 in passes of 4.
// |x| is formed once per row of x, not per weight row. With AVX-512 VNNI (and VL) one vpdpbusd
// on the same 32-byte registers replaces maddubs and madd: four instructions per block and
// row, and the int32 lanes hold the same exact sums.
//
// Bound: at batch 1 the weight's 34 bytes per 32 weights from memory, as weight-only; past a few
// rows the integer pipe: 5 vector operations per 32 multiply-adds per (row, weight row).
//
// Order: lane j of an output sums float(int32 sum of the products 4j..4j+3 of block b) * d_b
// by FMA over the blocks b in order; the 8 lanes are added in a fixed tree, the total times
// the row's scale plus the bias in one FMA (explicit, so that no compiler's contraction choice
// changes a bit). The portable path (every build; the only one without AVX2) does the same with
// std::fma (linear_w8a8_paths.h chooses among them), so a result depends neither on the path,
// the thread count, nor on the rows batched with it (tests/ops/quantized_linear_cases.cpp).

#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TESSERA_W8A8_AVX2 1
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define TESSERA_W8A8_VNNI 1
#endif
#endif

#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/f16_scales.h"
#include "tessera/core/cpu/linear_w8a8_paths.h"
#include "tessera/core/cpu/parallel.h"
#include "tessera/core/detail/element_convert.h"
#include "tessera/core/error.h"

namespace tessera {

namespace {

constexpr int64_t kBlock = 32;
constexpr int kLanes = 8;
// Rows of x per pass over the weight rows, and weight rows per pass: 4 x 2 keeps 8 float
// accumulators, the two weight blocks and the ones in AVX2's 16 registers; at batch 1, 4
// weight rows give 4 streams from memory, as the weight-only kernel reads them. Measured on the
// 2-core EPYC at M = 4, 8 and 16 (both benchmark layers, one build each): passes of 4 x 1
// weight rows took 1.14-1.43x the time of 4 x 2, and 4 x 3 (12 accumulators) 1.18-1.33x.
constexpr int kRows = 4;
constexpr int kColsBatched = 2;
constexpr int kColsSingle = 4;

// The fixed tree over 8 lanes, shared by both paths.
inline float lanes_total(const float* l) {
  const float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
  return (a0 + a2) + (a1 + a3);
}

// R rows of x (int8 values xq and their magnitudes xa, stride K) against C weight rows (q,
// stride K; scales as floats, stride `blocks`): lane sums into total[r][c] by lanes_total.
template <int R, int C>
void dot_portable(const int8_t* q, const float* scale, const int8_t* xq, int64_t K, int64_t blocks,
                  float total[R][C]) {
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      float l[kLanes] = {};
      const int8_t* qc = q + c * K;
      const int8_t* xr = xq + r * K;
      for (int64_t b = 0; b < blocks; ++b)
        for (int j = 0; j < kLanes; ++j) {
          int32_t s = 0;
          for (int i = 4 * j; i < 4 * j + 4; ++i)
            s += int32_t(qc[b * kBlock + i]) * int32_t(xr[b * kBlock + i]);
          l[j] = std::fma(float(s), scale[c * blocks + b], l[j]);
        }
      total[r][c] = lanes_total(l);
    }
}

#if defined(TESSERA_W8A8_AVX2)
// The products 4j..4j+3 of a 32-block summed exactly into int32 lane j: |x| (unsigned) times w
// with x's signs, by maddubs and madd, or by one vpdpbusd.
template <bool kVnni>
inline __m256i block_dot(__m256i abs_x, __m256i signed_w, __m256i ones) {
#if defined(TESSERA_W8A8_VNNI)
  if constexpr (kVnni) return _mm256_dpbusd_epi32(_mm256_setzero_si256(), abs_x, signed_w);
#endif
  return _mm256_madd_epi16(_mm256_maddubs_epi16(abs_x, signed_w), ones);
}

template <int R, int C, bool kVnni>
void dot_avx2(const int8_t* q, const float* scale, const int8_t* xq, const uint8_t* xa, int64_t K,
              int64_t blocks, float total[R][C]) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i w[C];
    __m256 d[C];
    for (int c = 0; c < C; ++c) {
      w[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + c * K + b * kBlock));
      d[c] = _mm256_set1_ps(scale[c * blocks + b]);
    }
    for (int r = 0; r < R; ++r) {
      const auto* xr = reinterpret_cast<const __m256i*>(xq + r * K + b * kBlock);
      const auto* ar = reinterpret_cast<const __m256i*>(xa + r * K + b * kBlock);
      const __m256i x = _mm256_loadu_si256(xr), ax = _mm256_loadu_si256(ar);
      for (int c = 0; c < C; ++c) {
        const __m256i p32 = block_dot<kVnni>(ax, _mm256_sign_epi8(w[c], x), ones);
        acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), d[c], acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      alignas(32) float l[kLanes];
      _mm256_store_ps(l, acc[r][c]);
      total[r][c] = lanes_total(l);
    }
}
#endif

using cpu::W8A8Path;

template <int R, int C>
void dot_w8a8(W8A8Path path, const int8_t* q, const float* scale, const int8_t* xq,
              const uint8_t* xa, int64_t K, int64_t blocks, float total[R][C]) {
#if defined(TESSERA_W8A8_VNNI)
  if (path == W8A8Path::avx512_vnni)
    return dot_avx2<R, C, true>(q, scale, xq, xa, K, blocks, total);
#endif
#if defined(TESSERA_W8A8_AVX2)
  if (path == W8A8Path::avx2) return dot_avx2<R, C, false>(q, scale, xq, xa, K, blocks, total);
#endif
  (void)path;
  (void)xa;
  dot_portable<R, C>(q, scale, xq, K, blocks, total);
}

W8A8Path g_path = cpu::w8a8_paths_available().back();  // the fastest this build has

// The pass over `rows` (1 to kRows) rows of x and `cols` (1 to C) weight rows, R and C fixed
// at compile time from them.
template <int C, int R = 1>
void dot_rows(W8A8Path path, int64_t rows, int64_t cols, const int8_t* q, const float* scale,
              const int8_t* xq, const uint8_t* xa, int64_t K, int64_t blocks,
              float total[kRows][kColsSingle]) {
  if constexpr (R <= kRows) {
    if (rows != R) return dot_rows<C, R + 1>(path, rows, cols, q, scale, xq, xa, K, blocks, total);
    if (cols == C) {
      float t[R][C];
      dot_w8a8<R, C>(path, q, scale, xq, xa, K, blocks, t);
      for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) total[r][c] = t[r][c];
      return;
    }
    for (int64_t c = 0; c < cols; ++c) {  // the last weight rows of a thread's range
      float t[R][1];
      dot_w8a8<R, 1>(path, q + c * K, scale + c * blocks, xq, xa, K, blocks, t);
      for (int r = 0; r < R; ++r) total[r][c] = t[r][0];
    }
  }
}

}  // namespace

const char* cpu::w8a8_path_name(W8A8Path path) {
  switch (path) {
    case W8A8Path::avx2:
      return "avx2";
    case W8A8Path::avx512_vnni:
      return "avx512_vnni";
    default:
      return "portable";
  }
}

std::vector<W8A8Path> cpu::w8a8_paths_available() {
  std::vector<W8A8Path> paths = {W8A8Path::portable};
#if defined(TESSERA_W8A8_AVX2)
  paths.push_back(W8A8Path::avx2);
#endif
#if defined(TESSERA_W8A8_VNNI)
  paths.push_back(W8A8Path::avx512_vnni);
#endif
  return paths;
}

W8A8Path cpu::w8a8_path() {
  return g_path;
}

void cpu::set_w8a8_path(W8A8Path path) {
  const std::vector<W8A8Path> paths = w8a8_paths_available();
  TESSERA_CHECK(std::find(paths.begin(), paths.end(), path) != paths.end(),
                "set_w8a8_path: this build has no ", w8a8_path_name(path),
                " path (it was compiled for a CPU without it)");
  g_path = path;
}

void CpuBackend::quantize_rows_q8(const Tensor& x, const Tensor& xq, const Tensor& xscale) {
  const char* op = "quantize_rows_q8";
  const int64_t M = x.size(0), K = x.size(1);
  auto* q = reinterpret_cast<int8_t*>(xq.data<int32_t>(op));
  float* s = xscale.data<float>(op);
  dispatch_floating(x.dtype(), op, [&]<class T>() {
    const T* xp = x.data<T>(op);
    cpu::parallel_for(
        M, std::max<int64_t>(1, 16384 / std::max<int64_t>(K, 1)), [&](int64_t lo, int64_t hi) {
          std::vector<float> row(static_cast<size_t>(K));
          for (int64_t m = lo; m < hi; ++m) {
            float amax = 0;
            for (int64_t k = 0; k < K; ++k) {
              row[size_t(k)] = float(element::load(xp + m * K + k));
              amax = std::max(amax, std::abs(row[size_t(k)]));
            }
            const float d = amax / 127.0f;
            s[m] = d;
            for (int64_t k = 0; k < K; ++k)
              q[m * K + k] =
                  d == 0 ? 0
                         : int8_t(std::clamp(std::nearbyint(row[size_t(k)] / d), -127.0f, 127.0f));
          }
        });
  });
}

void CpuBackend::linear_w8a8(const Tensor& xq, const Tensor& xscale, const Tensor& q8,
                             const Tensor& scale, const Tensor& bias, const Tensor& out) {
  const char* op = "linear_w8a8";
  const int64_t M = xq.size(0), K = xq.size(1) * 4, N = q8.size(0), blocks = K / kBlock;
  const auto* x8 = reinterpret_cast<const int8_t*>(xq.data<int32_t>(op));
  const auto* q = reinterpret_cast<const int8_t*>(q8.data<int32_t>(op));
  const float* xs = xscale.data<float>(op);
  const Half* s = scale.data<Half>(op);
  // |x| once for every weight row (maddubs takes one operand unsigned).
  std::vector<uint8_t> xa(static_cast<size_t>(M * K));
  for (int64_t i = 0; i < M * K; ++i) xa[size_t(i)] = uint8_t(x8[i] < 0 ? -x8[i] : x8[i]);
  dispatch_floating(out.dtype(), op, [&]<class T>() {
    const T* bp = bias.defined() ? bias.data<T>(op) : nullptr;
    T* o = out.data<T>(op);
    const int64_t C = M == 1 ? kColsSingle : kColsBatched;
    const W8A8Path path = g_path;
    cpu::parallel_for(
        N, std::max<int64_t>(1, 4096 / std::max<int64_t>(K, 1)), [&](int64_t lo, int64_t hi) {
          std::vector<float> scales(static_cast<size_t>(kColsSingle * blocks));
          float total[kRows][kColsSingle];
          for (int64_t n = lo; n < hi; n += C) {
            const int64_t cols = std::min<int64_t>(C, hi - n);
            cpu::scales_to_float(s + n * blocks, cols * blocks, scales.data());
            for (int64_t m = 0; m < M; m += kRows) {
              const int64_t rows = std::min<int64_t>(kRows, M - m);
              if (C == kColsSingle)
                dot_rows<kColsSingle>(path, rows, cols, q + n * K, scales.data(), x8 + m * K,
                                      xa.data() + m * K, K, blocks, total);
              else
                dot_rows<kColsBatched>(path, rows, cols, q + n * K, scales.data(), x8 + m * K,
                                       xa.data() + m * K, K, blocks, total);
              for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c) {
                  const float b = bp ? float(element::load(bp + n + c)) : 0.0f;
                  o[(m + r) * N + n + c] = element::convert<T>(std::fma(xs[m + r], total[r][c], b));
                }
            }
          }
        });
  });
}

}  // namespace tessera
