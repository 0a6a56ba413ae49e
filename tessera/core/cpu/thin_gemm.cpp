// The thin f32 GEMM (contract in thin_gemm.h). Algorithm: threads take pieces of the N outputs;
// each takes its weight rows three at a time (four for one or two rows of x) and, while those rows
// are in L1, dots them with every row of x, four rows at a time: 12 accumulators of 8 lanes,
// 3 + 1 loads per 12 FMAs.
//
// Bound: memory at M = 1-4 (every weight byte read once, 4 bytes per M multiply-adds), the
// FMA units from about M = 8. Eigen's GEBP instead packs the weight into panels for every
// product: at M = 2 that is a read and a write of the whole weight for 2 FLOPs per element.
// Measured on the 2-core AMD EPYC, 2 threads, against Eigen in the same run (bench_quantized,
// medians of 3, docs/benchmarks.md): 768 -> 3072 at M = 2, 4, 8 in 153, 234, 493 us against
// 504, 407, 740; 4096 -> 11008 in 5.8, 6.4, 8.9 ms against 14.0, 14.5, 18.4; a GPT-2-small
// decode step 2.5x, 2.2x and 1.7x faster. At M = 16 a standalone copy of this kernel ran level
// with Eigen (0.9-2.1 ms against 1.0-2.1 on GPT-2 small's three shapes), so the path ends at 8
// rows; one row stays on Eigen's GEMV.

#include "tessera/core/cpu/thin_gemm.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "tessera/core/cpu/parallel.h"
#include "tessera/core/error.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define TESSERA_THIN_GEMM 1
#endif

namespace tessera::cpu {

namespace {
std::atomic<bool> thin_gemm_on{true};
}  // namespace

bool thin_gemm_enabled() {
  return thin_gemm_available() && thin_gemm_on.load(std::memory_order_relaxed);
}

void set_thin_gemm_enabled(bool enabled) {
  thin_gemm_on.store(enabled, std::memory_order_relaxed);
}

#if defined(TESSERA_THIN_GEMM)

bool thin_gemm_available() {
  return true;
}

namespace {

constexpr int kLanes = 8;
constexpr int kRows = 4;  // rows of x per pass
// Weight rows per pass: 4 x 3 accumulators + 3 + 1 operands fill the 16 ymm registers; with
// at most 2 rows of x, 4 weight rows (8 accumulators) stream more of the weight at once (a
// standalone copy of this kernel read 11% faster with 4 than with 3 at one row).
constexpr int kCols = 3;
constexpr int kColsFewRows = 4;

// R x C outputs: rows of x (stride lda) against C weight rows (stride ldb). Every output sees
// the same operations whatever R and C are: lane i sums a[k] b[k] over k = i mod 8 in k order
// (fused multiply-adds), the tail k >= 8 floor(K / 8) is added to lanes 0.. in order, then
// lanes (i, i + 4), (i, i + 2), (0, 1) are added.
template <int R, int C>
void dot_block(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t K,
               const float* bias, float* out, int64_t ldo) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    __m256 w[C];
    for (int c = 0; c < C; ++c) w[c] = _mm256_loadu_ps(b + c * ldb + k);
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_loadu_ps(a + r * lda + k);
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(x, w[c], acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) {
      alignas(32) float l[kLanes];
      _mm256_store_ps(l, acc[r][c]);
      for (int64_t i = 0; k + i < K; ++i)
        l[i] = std::fma(a[r * lda + k + i], b[c * ldb + k + i], l[i]);
      for (int i = 0; i < 4; ++i) l[i] += l[i + 4];
      for (int i = 0; i < 2; ++i) l[i] += l[i + 2];
      const float dot = l[0] + l[1];
      out[r * ldo + c] = bias != nullptr ? dot + bias[c] : dot;
    }
}

// Every row of x against weight rows [n, n + C).
template <int C>
void columns(const float* a, int64_t lda, const float* b, int64_t ldb, const float* bias,
             float* out, int64_t ldo, int64_t M, int64_t K, int64_t n) {
  const float* w = b + n * ldb;
  const float* bn = bias != nullptr ? bias + n : nullptr;
  int64_t m = 0;
  for (; m + kRows <= M; m += kRows)
    dot_block<kRows, C>(a + m * lda, lda, w, ldb, K, bn, out + m * ldo + n, ldo);
  for (; m + 2 <= M; m += 2)
    dot_block<2, C>(a + m * lda, lda, w, ldb, K, bn, out + m * ldo + n, ldo);
  for (; m < M; ++m) dot_block<1, C>(a + m * lda, lda, w, ldb, K, bn, out + m * ldo + n, ldo);
}

}  // namespace

void thin_gemm(const float* a, int64_t lda, const float* b, int64_t ldb, const float* bias,
               float* out, int64_t ldo, int64_t M, int64_t N, int64_t K,
               const std::function<void(int64_t n0, int64_t n1)>* piece) {
  // Pieces of 96 weight rows (whole passes of 3 or 4), taken dynamically: a thread that is
  // descheduled on a shared machine leaves its pieces to the other instead of stalling the
  // product (the same reason as cpu_matmul.cpp's split). Below about 2^16 multiply-adds a
  // parallel region costs more than it saves.
  constexpr int64_t kPiece = 96;
  const int64_t pieces = (N + kPiece - 1) / kPiece;
  auto run = [&](int64_t p) {
    const int64_t n0 = p * kPiece, n1 = std::min(N, n0 + kPiece);
    int64_t n = n0;
    if (M <= 2) {
      for (; n + kColsFewRows <= n1; n += kColsFewRows)
        columns<kColsFewRows>(a, lda, b, ldb, bias, out, ldo, M, K, n);
    }
    for (; n + kCols <= n1; n += kCols) columns<kCols>(a, lda, b, ldb, bias, out, ldo, M, K, n);
    for (; n < n1; ++n) columns<1>(a, lda, b, ldb, bias, out, ldo, M, K, n);
    if (piece != nullptr) (*piece)(n0, n1);
  };
  if (pieces > 1 && M * N * K >= (int64_t(1) << 16) && num_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t p = 0; p < pieces; ++p) run(p);
  } else {
    for (int64_t p = 0; p < pieces; ++p) run(p);
  }
}

#else  // no AVX2 and FMA at compile time: Eigen takes every product

bool thin_gemm_available() {
  return false;
}

void thin_gemm(const float*, int64_t, const float*, int64_t, const float*, float*, int64_t, int64_t,
               int64_t, int64_t, const std::function<void(int64_t, int64_t)>*) {
  detail::throw_error("thin_gemm: this build has no AVX2 and FMA (thin_gemm_available())");
}

#endif

}  // namespace tessera::cpu
