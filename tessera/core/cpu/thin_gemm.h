#pragma once
// The thin f32 GEMM: out[M, N] = a[M, K] · b[N, K]ᵀ (+ bias[N]) for M up to kThinGemmRows, with
// both operands contiguous along K. This is a linear layer's forward in decode (a few
// sequences, one token each), where Eigen's GEBP packs the whole weight for two rows of x and
// runs at a third of the speed of one row (measured, thin_gemm.cpp). A weight row is read once
// from memory for all M rows of x, which stay in L1. ops::matmul takes it for 2 to
// kThinGemmRows rows; one row stays on Eigen's GEMV, whose decode step measured 10% faster.
//
// Each output is a dot product in one fixed order (8 lanes over K in order, the tail into the
// first lanes, a fixed tree), whatever M, the other outputs and the thread count: a row has the
// same bits in every batch of 2 to kThinGemmRows rows.

#include <cstdint>
#include <functional>

namespace tessera::cpu {

inline constexpr int64_t kThinGemmRows = 8;

// Whether this build has the thin path (AVX2 and FMA at compile time); without it every
// product runs on Eigen.
bool thin_gemm_available();
// Whether ops::matmul takes it (available, and not switched off): benchmarks time Eigen on the
// same shapes in the same run by switching it off. Process-wide; not for use while products run.
bool thin_gemm_enabled();
void set_thin_gemm_enabled(bool enabled);

// out[m * ldo + n] = bias[n] (or 0) + sum_k a[m * lda + k] * b[n * ldb + k], for m < M <=
// kThinGemmRows and n < N. Threads split N; `piece(n0, n1)` runs on each finished range of
// columns (all M rows) while it is in cache (matmul_gelu's epilogue), when given.
void thin_gemm(const float* a, int64_t lda, const float* b, int64_t ldb, const float* bias,
               float* out, int64_t ldo, int64_t M, int64_t N, int64_t K,
               const std::function<void(int64_t n0, int64_t n1)>* piece);

}  // namespace tessera::cpu
