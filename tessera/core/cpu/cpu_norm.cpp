// LayerNorm and RMSNorm over the rows of contiguous [rows, C]. Memory-bound: the forward pass
// reads x once (the row stays in cache for its second pass) and writes y; the backward pass
// reads x and gy and writes gx, so about 3 (forward) and 4 (backward) row-sized transfers.
//
// Statistics are computed in the compute type (float for f32/bf16/f16, double for f64) with
// two passes over each cached row: the mean, then the mean squared deviation. This avoids the
// cancellation of E[x^2] - E[x]^2 when |mean| >> std. Inner loops are Eigen array expressions.
//
// Determinism: rows are independent, except for gw/gb, which sum over rows. Those sums are
// formed per fixed row chunk (boundaries depend only on `rows`, never on the thread count),
// each chunk summed by one thread in row order, and the chunk partials are combined in chunk
// order afterwards. The result is bit-identical for 1 thread or 16.

#include <Eigen/Core>
#include <cmath>
#include <type_traits>
#include <vector>

#include "tessera/core/detail/element_convert.h"
#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/parallel.h"

namespace tessera {

namespace {

template <class A>
using Arr = Eigen::Array<A, Eigen::Dynamic, 1>;
template <class A>
using CMap = Eigen::Map<const Arr<A>>;
template <class A>
using MMap = Eigen::Map<Arr<A>>;

// Rows per chunk at least this many, so the partial gw/gb rows cost at most 1/8 extra adds;
// at most kMaxChunks chunks, so the partials stay small and 64 threads still have work.
constexpr int64_t kMinRowsPerChunk = 8;
constexpr int64_t kMaxChunks = 64;

int64_t row_grain(int64_t n) {
  return std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1));
}

// Where a compute-type output row is formed: in place when T is the compute type, else in buf
// (then written back by finish_row).
template <class T, class A = acc_type_t<T>>
A* out_row(T* p, A* buf) {
  if constexpr (std::is_same_v<T, A>) {
    return p;
  } else {
    return buf;
  }
}

template <class T, class A = acc_type_t<T>>
void finish_row(const A* src, int64_t n, T* p) {
  if constexpr (!std::is_same_v<T, A>) {
    for (int64_t i = 0; i < n; ++i) element::store(p + i, src[i]);
  }
}

// A [C] parameter (weight or bias) converted once to the compute type; empty if undefined.
template <class T, class A = acc_type_t<T>>
Arr<A> load_param(const Tensor& t, int64_t n, const char* op) {
  if (!t.defined()) return Arr<A>();
  Arr<A> out(n);
  const T* p = t.data<T>(op);
  for (int64_t i = 0; i < n; ++i) out[i] = element::load(p + i);
  return out;
}

// Row range [begin, end) of chunk c out of `chunks`.
struct ChunkPlan {
  int64_t chunks;
  int64_t begin(int64_t rows, int64_t c) const { return rows * c / chunks; }
};

ChunkPlan plan_chunks(int64_t rows) {
  int64_t by_size = (rows + kMinRowsPerChunk - 1) / kMinRowsPerChunk;
  return {std::min(by_size, kMaxChunks)};
}

// Sums per-chunk partials [chunks, n] in chunk order into dst (compute type -> T).
template <class T, class A = acc_type_t<T>>
void combine_partials(const Arr<A>& partial, int64_t chunks, int64_t n, const Tensor& dst,
                      const char* op) {
  Arr<A> total = Arr<A>::Zero(n);
  for (int64_t c = 0; c < chunks; ++c) total += CMap<A>(partial.data() + c * n, n);
  T* p = dst.data<T>(op);
  for (int64_t i = 0; i < n; ++i) element::store(p + i, total[i]);
}

// Shared backward for both norms. For LayerNorm xhat = (x - mean) * rstd; for RMSNorm
// xhat = x * rstd (mean undefined). With g = gy * w:
//   gx = rstd * (g - mean(g) - xhat * mean(g * xhat))   (LayerNorm)
//   gx = rstd * (g - xhat * mean(g * xhat))             (RMSNorm)
//   gw = sum over rows of gy * xhat,  gb = sum over rows of gy.
template <class T>
void norm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                   const Tensor& gy, const Tensor& gx, const Tensor& gw, const Tensor& gb,
                   const char* op) {
  using A = acc_type_t<T>;
  const int64_t rows = x.shape()[0], n = x.shape()[1];
  const T* xp = x.data<T>(op);
  const T* gp = gy.data<T>(op);
  T* gxp = gx.data<T>(op);
  const A* mp = mean.defined() ? mean.data<A>(op) : nullptr;
  const A* rp = rstd.data<A>(op);
  const Arr<A> w = load_param<T>(weight, n, op);
  const bool want_w = gw.defined(), want_b = gb.defined();
  const ChunkPlan plan = plan_chunks(rows);
  Arr<A> part_w = Arr<A>::Zero(want_w ? plan.chunks * n : 0);
  Arr<A> part_b = Arr<A>::Zero(want_b ? plan.chunks * n : 0);
  const A inv_n = A(1) / A(n);

  cpu::parallel_for(plan.chunks, 1, [&](int64_t cb, int64_t ce) {
    Arr<A> xbuf(n), gbuf(n), obuf(n), xhat(n), g(n);
    for (int64_t c = cb; c < ce; ++c) {
      for (int64_t r = plan.begin(rows, c); r < plan.begin(rows, c + 1); ++r) {
        CMap<A> xv(element::load_row(xp + r * n, n, xbuf.data()), n);
        CMap<A> gv(element::load_row(gp + r * n, n, gbuf.data()), n);
        const A rs = rp[r];
        if (mp) {
          xhat = (xv - mp[r]) * rs;
        } else {
          xhat = xv * rs;
        }
        g = gv * w;
        const A dot = (g * xhat).sum() * inv_n;
        MMap<A> out(out_row(gxp + r * n, obuf.data()), n);
        if (mp) {
          out = rs * (g - g.sum() * inv_n - xhat * dot);
        } else {
          out = rs * (g - xhat * dot);
        }
        finish_row(out.data(), n, gxp + r * n);
        if (want_w) MMap<A>(part_w.data() + c * n, n) += gv * xhat;
        if (want_b) MMap<A>(part_b.data() + c * n, n) += gv;
      }
    }
  });
  if (want_w) combine_partials<T>(part_w, plan.chunks, n, gw, op);
  if (want_b) combine_partials<T>(part_b, plan.chunks, n, gb, op);
}

}  // namespace

void CpuBackend::layernorm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   double eps, const Tensor& y, const Tensor& mean,
                                   const Tensor& rstd) {
  dispatch_floating(x.dtype(), "layernorm", [&]<class T>() {
    using A = acc_type_t<T>;
    const int64_t rows = x.shape()[0], n = x.shape()[1];
    const T* xp = x.data<T>("layernorm");
    T* yp = y.data<T>("layernorm");
    A* mp = mean.data<A>("layernorm");
    A* rp = rstd.data<A>("layernorm");
    const Arr<A> w = load_param<T>(weight, n, "layernorm");
    const Arr<A> b = load_param<T>(bias, n, "layernorm");
    cpu::parallel_for(rows, row_grain(n), [&](int64_t begin, int64_t end) {
      Arr<A> xbuf(n), ybuf(n);
      for (int64_t r = begin; r < end; ++r) {
        CMap<A> xv(element::load_row(xp + r * n, n, xbuf.data()), n);
        const A mu = xv.sum() / A(n);
        const A var = (xv - mu).square().sum() / A(n);
        const A rs = A(1) / std::sqrt(var + A(eps));
        MMap<A> yv(out_row(yp + r * n, ybuf.data()), n);
        if (b.size() > 0) {
          yv = (xv - mu) * rs * w + b;
        } else {
          yv = (xv - mu) * rs * w;
        }
        finish_row(yv.data(), n, yp + r * n);
        mp[r] = mu;
        rp[r] = rs;
      }
    });
  });
}

void CpuBackend::layernorm_backward(const Tensor& x, const Tensor& weight, const Tensor& mean,
                                    const Tensor& rstd, const Tensor& gy, const Tensor& gx,
                                    const Tensor& gw, const Tensor& gb) {
  dispatch_floating(x.dtype(), "layernorm_backward", [&]<class T>() {
    norm_backward<T>(x, weight, mean, rstd, gy, gx, gw, gb, "layernorm_backward");
  });
}

void CpuBackend::rmsnorm_forward(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                                 const Tensor& rstd) {
  dispatch_floating(x.dtype(), "rmsnorm", [&]<class T>() {
    using A = acc_type_t<T>;
    const int64_t rows = x.shape()[0], n = x.shape()[1];
    const T* xp = x.data<T>("rmsnorm");
    T* yp = y.data<T>("rmsnorm");
    A* rp = rstd.data<A>("rmsnorm");
    const Arr<A> w = load_param<T>(weight, n, "rmsnorm");
    cpu::parallel_for(rows, row_grain(n), [&](int64_t begin, int64_t end) {
      Arr<A> xbuf(n), ybuf(n);
      for (int64_t r = begin; r < end; ++r) {
        CMap<A> xv(element::load_row(xp + r * n, n, xbuf.data()), n);
        const A rs = A(1) / std::sqrt(xv.square().sum() / A(n) + A(eps));
        MMap<A> yv(out_row(yp + r * n, ybuf.data()), n);
        yv = xv * rs * w;
        finish_row(yv.data(), n, yp + r * n);
        rp[r] = rs;
      }
    });
  });
}

void CpuBackend::rmsnorm_backward(const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                  const Tensor& gy, const Tensor& gx, const Tensor& gw) {
  dispatch_floating(x.dtype(), "rmsnorm_backward", [&]<class T>() {
    norm_backward<T>(x, weight, Tensor(), rstd, gy, gx, gw, Tensor(), "rmsnorm_backward");
  });
}

}  // namespace tessera
