// Fused cross-entropy over logits [N, V] (unit stride in V; rows may be strided, as for the
// first V columns of a padded vocabulary). Memory-bound: the forward pass reads each
// row twice from cache (max, then sum of exp) and writes one lse per row; the backward pass
// reads each row once and writes dlogits, recomputing softmax as exp(logit - lse), so the
// probabilities are never stored.
//
// Arithmetic runs in the compute type (float for f32/bf16/f16, double for f64); lse, loss and
// valid are stored in that type too. Each row's loss term goes to its own slot, and the slots
// are summed in row order in double afterwards, so the loss does not depend on the thread
// count.

#include <Eigen/Core>
#include <cmath>
#include <type_traits>
#include <vector>

#include "tessera/core/detail/element_convert.h"
#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/parallel.h"

namespace tessera {

namespace {

// The targets as int64 after checking every one is ignore_index or in [0, V); names the first
// bad one. Also returns how many rows count.
struct Targets {
  std::vector<int64_t> t;
  int64_t valid = 0;
};

Targets load_targets(const Tensor& targets, int64_t num_classes, int64_t ignore_index,
                     const char* op) {
  return dispatch_integer(targets.dtype(), op, [&]<class I>() {
    const I* p = targets.data<I>(op);
    const int64_t n = targets.numel();
    Targets out;
    out.t.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = int64_t(p[i]);
      out.t[size_t(i)] = t;
      if (t == ignore_index) continue;
      TESSERA_CHECK(t >= 0 && t < num_classes, op, ": target ", t, " at flat position ", i,
                    " is outside [0, ", num_classes, ") and is not ignore_index (", ignore_index,
                    ")");
      ++out.valid;
    }
    return out;
  });
}

int64_t row_grain(int64_t n) {
  return std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1));
}

}  // namespace

void CpuBackend::cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                       int64_t ignore_index, const Tensor& loss, const Tensor& lse,
                                       const Tensor& valid) {
  const char* op = "cross_entropy";
  const int64_t rows = logits.shape()[0], n = logits.shape()[1], ld = logits.stride(0);
  const Targets tg = load_targets(targets, n, ignore_index, op);
  dispatch_floating(logits.dtype(), op, [&]<class T>() {
    using A = acc_type_t<T>;
    using Arr = Eigen::Array<A, Eigen::Dynamic, 1>;
    const T* xp = logits.data<T>(op);
    A* lp = lse.data<A>(op);
    std::vector<double> row_loss(size_t(rows), 0.0);
    cpu::parallel_for(rows, row_grain(n), [&](int64_t begin, int64_t end) {
      Arr buf(n);
      for (int64_t r = begin; r < end; ++r) {
        const A* xr = element::load_row(xp + r * ld, n, buf.data());
        Eigen::Map<const Arr> xv(xr, n);
        A m = xv.maxCoeff();
        // An all -inf row has lse -inf; a +inf or NaN entry makes lse non-finite as it should.
        const A shift = std::isfinite(double(m)) ? m : A(0);
        const A l = shift + std::log((xv - shift).exp().sum());
        lp[r] = l;
        const int64_t t = tg.t[size_t(r)];
        if (t != ignore_index) row_loss[size_t(r)] = double(l - xr[t]);
      }
    });
    double total = 0;
    for (double v : row_loss) total += v;
    *loss.data<A>(op) = tg.valid > 0 ? A(total / double(tg.valid)) : A(0);
    *valid.data<A>(op) = A(tg.valid);
  });
}

void CpuBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                        const Tensor& lse, const Tensor& gloss, const Tensor& valid,
                                        int64_t ignore_index, const Tensor& glogits) {
  const char* op = "cross_entropy_backward";
  const int64_t rows = logits.shape()[0], n = logits.shape()[1];
  const int64_t ld = logits.stride(0), gld = glogits.stride(0);
  const Targets tg = load_targets(targets, n, ignore_index, op);
  dispatch_floating(logits.dtype(), op, [&]<class T>() {
    using A = acc_type_t<T>;
    using Arr = Eigen::Array<A, Eigen::Dynamic, 1>;
    const T* xp = logits.data<T>(op);
    const A* lp = lse.data<A>(op);
    T* gp = glogits.data<T>(op);
    const A count = *valid.data<A>(op);
    // No valid rows: every row is ignored, and the gradient is 0, not 0/0.
    const A scale = count > A(0) ? *gloss.data<A>(op) / count : A(0);
    cpu::parallel_for(rows, row_grain(n), [&](int64_t begin, int64_t end) {
      Arr xbuf(n), gbuf(n);
      for (int64_t r = begin; r < end; ++r) {
        const T* row = xp + r * ld;
        T* grow = gp + r * gld;
        const int64_t t = tg.t[size_t(r)];
        if (t == ignore_index) {
          for (int64_t j = 0; j < n; ++j) grow[j] = element::convert<T>(A(0));
          continue;
        }
        Eigen::Map<const Arr> xv(element::load_row(row, n, xbuf.data()), n);
        A* gr = gbuf.data();
        if constexpr (std::is_same_v<T, A>) gr = grow;  // formed in place
        Eigen::Map<Arr>(gr, n) = (xv - lp[r]).exp() * scale;
        gr[t] -= scale;
        if constexpr (!std::is_same_v<T, A>) {
          for (int64_t j = 0; j < n; ++j) element::store(grow + j, gr[j]);
        }
      }
    });
  });
}

}  // namespace tessera
