// Reductions over [outer, r, inner], softmax rows and the squared norm. Memory-bound.
// Determinism: each output is accumulated in a fixed order (long rows in fixed-size chunks
// whose partials are combined in chunk order), so results do not depend on the thread count.

#include <Eigen/Core>
#include <cmath>
#include <limits>
#include <vector>

#include "tessera/core/detail/element_convert.h"
#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/parallel.h"

namespace tessera {

namespace {

// Sum of n contiguous elements, chunked; partials combined in double in chunk order.
template <class T>
double sum_span(const T* x, int64_t n) {
  const int64_t chunks = (n + cpu::kReduceChunk - 1) / cpu::kReduceChunk;
  std::vector<double> partial(size_t(std::max<int64_t>(chunks, 1)), 0.0);
  cpu::parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const T* p = x + c * cpu::kReduceChunk;
      int64_t len = std::min(cpu::kReduceChunk, n - c * cpu::kReduceChunk);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        partial[size_t(c)] =
            double(Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(p, len).sum());
      } else {
        acc_type_t<T> acc = 0;
        for (int64_t i = 0; i < len; ++i) acc += element::load(p + i);
        partial[size_t(c)] = double(acc);
      }
    }
  });
  double total = 0;
  for (double v : partial) total += v;
  return total;
}

}  // namespace

void CpuBackend::reduce(ReduceOp op, const Tensor& x, const Tensor& out, const Tensor& indices) {
  const int64_t outer = x.shape()[0], r = x.shape()[1], inner = x.shape()[2];
  const char* name = reduce_op_name(op);
  dispatch_all(x.dtype(), name, [&]<class T>() {
    using A = acc_type_t<T>;
    const T* xp = x.data<T>(name);
    T* op_ = out.data<T>(name);
    int64_t* ip = op == ReduceOp::max ? indices.data<int64_t>(name) : nullptr;
    if (op != ReduceOp::max && inner == 1 && outer == 1) {
      double s = sum_span(xp, r);
      op_[0] = element::convert<T>(op == ReduceOp::mean ? s / double(r) : s);
      return;
    }
    if (op != ReduceOp::max && inner == 1) {
      // One row per output: rows in parallel, each summed serially.
      cpu::parallel_for(
          outer, std::max<int64_t>(1, (1 << 14) / std::max<int64_t>(r, 1)),
          [&](int64_t b, int64_t e) {
            for (int64_t o = b; o < e; ++o) {
              double s = 0;
              if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
                s = double(
                    Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(xp + o * r, r).sum());
              } else {
                for (int64_t k = 0; k < r; ++k) s += double(element::load(xp + o * r + k));
              }
              op_[o] = element::convert<T>(op == ReduceOp::mean ? s / double(r) : s);
            }
          });
      return;
    }
    // General [outer, r, inner]: parallel over (outer, inner-block); accumulate along r with the
    // inner block contiguous, so the inner loop vectorises.
    const int64_t block = 256;
    const int64_t nblocks = (inner + block - 1) / block;
    cpu::parallel_for(outer * nblocks, 1, [&](int64_t b, int64_t e) {
      std::vector<A> acc(static_cast<size_t>(block));
      std::vector<int64_t> arg(static_cast<size_t>(block));
      for (int64_t job = b; job < e; ++job) {
        int64_t o = job / nblocks, i0 = (job % nblocks) * block;
        int64_t len = std::min(block, inner - i0);
        const T* base = xp + o * r * inner + i0;
        if (op == ReduceOp::max) {
          for (int64_t i = 0; i < len; ++i) {
            acc[size_t(i)] = element::load(base + i);
            arg[size_t(i)] = 0;
          }
          for (int64_t k = 1; k < r; ++k)
            for (int64_t i = 0; i < len; ++i) {
              A v = element::load(base + k * inner + i);
              // NaN propagates: it wins against anything, and keeps its first position.
              bool better = v > acc[size_t(i)] ||
                            (std::isnan(double(v)) && !std::isnan(double(acc[size_t(i)])));
              if (better) {
                acc[size_t(i)] = v;
                arg[size_t(i)] = k;
              }
            }
          for (int64_t i = 0; i < len; ++i) {
            op_[o * inner + i0 + i] = element::convert<T>(acc[size_t(i)]);
            ip[o * inner + i0 + i] = arg[size_t(i)];
          }
        } else {
          std::fill(acc.begin(), acc.begin() + len, A(0));
          for (int64_t k = 0; k < r; ++k)
            for (int64_t i = 0; i < len; ++i) acc[size_t(i)] += element::load(base + k * inner + i);
          for (int64_t i = 0; i < len; ++i) {
            A v = acc[size_t(i)];
            if (op == ReduceOp::mean) v = v / A(r);
            op_[o * inner + i0 + i] = element::convert<T>(v);
          }
        }
      }
    });
  });
}

void CpuBackend::max_backward(const Tensor& indices, const Tensor& gy, const Tensor& gx) {
  const int64_t outer = gx.shape()[0], r = gx.shape()[1], inner = gx.shape()[2];
  const int64_t* ip = indices.data<int64_t>("max_backward");
  dispatch_floating(gx.dtype(), "max_backward", [&]<class T>() {
    const T* g = gy.data<T>("max_backward");
    T* o = gx.data<T>("max_backward");
    cpu::parallel_for(outer, 64, [&](int64_t b, int64_t e) {
      for (int64_t oo = b; oo < e; ++oo)
        for (int64_t i = 0; i < inner; ++i) {
          int64_t k = ip[oo * inner + i];
          o[(oo * r + k) * inner + i] = g[oo * inner + i];
        }
    });
  });
}

void CpuBackend::softmax(const Tensor& x, const Tensor& out, bool log) {
  const int64_t rows = x.shape()[0], n = x.shape()[1];
  dispatch_floating(x.dtype(), log ? "log_softmax" : "softmax", [&]<class T>() {
    using A = acc_type_t<T>;
    using Arr = Eigen::Array<A, Eigen::Dynamic, 1>;
    const T* xp = x.data<T>("softmax");
    T* op_ = out.data<T>("softmax");
    cpu::parallel_for(rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)),
                      [&](int64_t b, int64_t e) {
                        Arr row(n);
                        for (int64_t rr = b; rr < e; ++rr) {
                          for (int64_t j = 0; j < n; ++j) row[j] = element::load(xp + rr * n + j);
                          A m = row.maxCoeff();
                          const bool all_neg_inf = std::isinf(double(m)) && m < A(0);
                          if (!std::isfinite(double(m))) m = std::isnan(double(m)) ? m : A(0);
                          row = (row - m).exp();
                          // Eigen's exp clamps its input near -88 and returns ~3e-39 for -inf
                          // on some CPUs (AVX2), which made an all -inf row uniform instead of
                          // the convention's 0 / 0 = NaN.
                          if (all_neg_inf) row.setZero();
                          A s = row.sum();
                          if (log) {
                            A lse = m + std::log(s);
                            for (int64_t j = 0; j < n; ++j)
                              op_[rr * n + j] = element::convert<T>(element::load(xp + rr * n + j) - lse);
                          } else {
                            row /= s;
                            for (int64_t j = 0; j < n; ++j)
                              op_[rr * n + j] = element::convert<T>(row[j]);
                          }
                        }
                      });
  });
}

void CpuBackend::softmax_backward(const Tensor& y, const Tensor& gy, const Tensor& gx, bool log) {
  const int64_t rows = y.shape()[0], n = y.shape()[1];
  dispatch_floating(y.dtype(), "softmax_backward", [&]<class T>() {
    using A = acc_type_t<T>;
    const T* yp = y.data<T>("softmax_backward");
    const T* gp = gy.data<T>("softmax_backward");
    T* op_ = gx.data<T>("softmax_backward");
    cpu::parallel_for(
        rows, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
          for (int64_t rr = b; rr < e; ++rr) {
            const T* yr = yp + rr * n;
            const T* gr = gp + rr * n;
            T* o = op_ + rr * n;
            A dot = 0;
            if (log) {
              for (int64_t j = 0; j < n; ++j) dot += element::load(gr + j);
              for (int64_t j = 0; j < n; ++j)
                o[j] = element::convert<T>(element::load(gr + j) - std::exp(element::load(yr + j)) * dot);
            } else {
              for (int64_t j = 0; j < n; ++j) dot += element::load(gr + j) * element::load(yr + j);
              for (int64_t j = 0; j < n; ++j)
                o[j] = element::convert<T>(element::load(yr + j) * (element::load(gr + j) - dot));
            }
          }
        });
  });
}

void CpuBackend::squared_norm(const std::vector<Tensor>& xs, const Tensor& out) {
  double total = 0;
  for (const Tensor& t : xs) {
    const int64_t n = t.numel();
    if (n == 0) continue;
    dispatch_floating(t.dtype(), "squared_norm", [&]<class T>() {
      const T* p = t.data<T>("squared_norm");
      const int64_t chunks = (n + cpu::kReduceChunk - 1) / cpu::kReduceChunk;
      std::vector<double> partial(size_t(chunks), 0.0);
      cpu::parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) {
          const T* q = p + c * cpu::kReduceChunk;
          int64_t len = std::min(cpu::kReduceChunk, n - c * cpu::kReduceChunk);
          double acc = 0;
          if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
            acc =
                double(Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(q, len).square().sum());
          } else {
            for (int64_t i = 0; i < len; ++i) {
              double v = double(element::load(q + i));
              acc += v * v;
            }
          }
          partial[size_t(c)] = acc;
        }
      });
      for (double v : partial) total += v;
    });
  }
  *out.data<float>("squared_norm") = float(total);
}

}  // namespace tessera
