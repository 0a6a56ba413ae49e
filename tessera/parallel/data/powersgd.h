#pragma once
// PowerSgd: rank-R PowerSGD (Vogels, Karimireddy and Jaggi, 2019) over the buckets of a
// FlatLayout, in the three phases the GradReducer drives per bucket:
//
//   begin   M = g + e for every compressed matrix (g this rank's gradient, e its residual),
//           P = M Q into the bucket's P buffer, the uncompressed parameters after it
//                                                        -> all-reduce (avg) the P buffer
//   middle  P <- orthonormal columns of P (Gram-Schmidt), Q = M^T P into the Q buffer; the
//           averaged uncompressed values back into the gradient
//                                                        -> all-reduce (avg) the Q buffer
//   end     e = M - P Q^T, and the gradient becomes P Q^T (the same on every rank)
//
// Per n x m matrix and step that is (n + m) R values on the wire instead of n m, in two
// all-reduces; Q is kept from step to step (warm start: one power iteration per step tracks the
// top subspace). Error feedback makes the applied updates plus the residual equal the raw
// gradients summed over steps, on every rank, to rounding (tests/parallel/powersgd_test.cpp).
//
// Which matrices compress: parameters with >= 2 dims, viewed as size(0) x (the rest), when
// powersgd_compresses (grad_compression.h). Gram-Schmidt runs on the host in double (P is small:
// n R values); on a device P is copied there and back.

#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/parallel/data/flat_layout.h"

namespace tessera::parallel {

class PowerSgd {
 public:
  // Q starts as the same normal draws on every rank (Philox keyed by `seed`).
  PowerSgd(const FlatLayout& layout, int rank, uint64_t seed);

  // Whether bucket b holds a matrix that compresses (otherwise reduce it uncompressed).
  bool compresses(int b) const { return !plans_[size_t(b)].matrices.empty(); }
  // `grad` is bucket b's full local gradient (FlatLayout order); each phase updates it in place.
  Tensor begin(int b, const Tensor& grad);
  Tensor middle(int b, const Tensor& grad);
  void end(int b, const Tensor& grad);

  int rank() const { return rank_; }
  // The residual of layout parameter `param`, n x m, or undefined if it does not compress.
  Tensor residual(int param) const;
  // Elements of bucket b's P and Q buffers (what its two all-reduces carry).
  int64_t p_numel(int b) const { return plans_[size_t(b)].p_numel; }
  int64_t q_numel(int b) const { return plans_[size_t(b)].q_numel; }
  // Residuals, P and Q buffers, in bytes.
  int64_t held_bytes() const;

 private:
  struct Matrix {
    int param = 0;
    int64_t n = 0, m = 0;
    int64_t offset = 0;    // in the bucket
    int64_t p_offset = 0;  // in the P buffer (n R values)
    int64_t q_offset = 0;  // in the Q buffer (m R values)
    Tensor residual;       // n x m
  };
  struct Plain {
    int64_t offset = 0, numel = 0;  // in the bucket
    int64_t p_offset = 0;           // in the P buffer, after the matrices' P
  };
  struct Plan {
    std::vector<Matrix> matrices;
    std::vector<Plain> plain;
    int64_t p_numel = 0, q_numel = 0;
    Tensor p, q;  // the buffers; q persists (warm start)
  };

  Tensor matrix_view(const Tensor& grad, const Matrix& x) const;
  Tensor p_view(const Plan& plan, const Matrix& x) const;
  Tensor q_view(const Plan& plan, const Matrix& x) const;

  const FlatLayout& layout_;
  int rank_;
  std::vector<Plan> plans_;
};

// Makes the columns of `p` (n x r, contiguous f32, any device) orthonormal in place by
// Gram-Schmidt in column order, in double on the host. A column left exactly zero (a zero
// gradient) stays zero.
void orthonormalize_columns(const Tensor& p);

}  // namespace tessera::parallel
