#pragma once
// Iteration over N operands that share one shape but have their own element strides (stride 0
// for broadcast dims). Dims are coalesced first, so a contiguous operand set becomes one flat
// row and a broadcast bias becomes [rows, cols]; the callback then sees the innermost rows.

#include <array>
#include <cstdint>

#include "tessera/core/cpu/parallel.h"
#include "tessera/core/shape.h"

namespace tessera::cpu {

template <int N>
struct StridedLoop {
  Shape shape;                     // coalesced; at least 1-d
  std::array<Strides, N> strides;  // per operand, in elements

  StridedLoop(const Shape& full_shape, const std::array<Strides, N>& full_strides) {
    // Drop size-1 dims, then merge neighbours whose strides chain for every operand.
    for (int d = 0; d < full_shape.size(); ++d) {
      if (full_shape[d] == 1) continue;
      int last = shape.size() - 1;
      bool merge = last >= 0;
      for (int k = 0; k < N && merge; ++k)
        merge = strides[k][last] == full_strides[k][d] * full_shape[d];
      if (merge) {
        shape[last] *= full_shape[d];
        for (int k = 0; k < N; ++k) strides[k][last] = full_strides[k][d];
      } else {
        shape.push_back(full_shape[d]);
        for (int k = 0; k < N; ++k) strides[k].push_back(full_strides[k][d]);
      }
    }
    if (shape.empty()) {
      shape.push_back(1);
      for (int k = 0; k < N; ++k) strides[k].push_back(1);
    }
  }

  int64_t inner_size() const { return shape.back(); }
  int64_t rows() const { return shape.numel() / shape.back(); }
  std::array<int64_t, N> inner_strides() const {
    std::array<int64_t, N> s;
    for (int k = 0; k < N; ++k) s[k] = strides[k].back();
    return s;
  }

  // Element offsets of the start of inner row `row` for each operand.
  std::array<int64_t, N> row_offsets(int64_t row) const {
    std::array<int64_t, N> off{};
    for (int d = shape.size() - 2; d >= 0; --d) {
      int64_t i = row % shape[d];
      row /= shape[d];
      for (int k = 0; k < N; ++k) off[k] += i * strides[k][d];
    }
    return off;
  }

  // f(offsets, n, inner_strides) for every inner row, in parallel over rows (or over pieces of
  // a single long row).
  template <class F>
  void for_each_row(F&& f, int64_t grain = 1 << 15) const {
    const int64_t n = inner_size();
    const auto inner = inner_strides();
    const int64_t nrows = rows();
    if (nrows == 1) {
      parallel_for(n, grain, [&](int64_t b, int64_t e) {
        std::array<int64_t, N> off;
        for (int k = 0; k < N; ++k) off[k] = b * inner[k];
        f(off, e - b, inner);
      });
      return;
    }
    parallel_for(nrows, std::max<int64_t>(1, grain / std::max<int64_t>(n, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t r = b; r < e; ++r) f(row_offsets(r), n, inner);
                 });
  }
};

}  // namespace tessera::cpu
