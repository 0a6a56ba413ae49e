// Causal attention on the CPU, flash style: queries and keys are tiled into blocks of 64 or 128
// rows, S = scale * Q_blk K_blk^T is formed one tile at a time with Eigen GEMMs, and an
// online softmax (running row max m and sum l) folds each tile into the output accumulator,
// so no Tq x Tk matrix ever exists. Extra memory: one workspace of O(block * (block + D)) per
// thread plus O(T) row statistics (lse, and D_i in backward).
//
// Causality: query i sits at position Tk - Tq + i. Key tiles entirely in its future are
// skipped, and within a tile row r simply uses its first n_r columns, so the mask costs
// nothing outside the diagonal tiles.
//
// Bound: compute. Per head the forward does 2 GEMMs of 2 * Tq * Tk * D FLOPs each (about half
// of it under the causal mask) plus Tq * Tk / 2 exps; tiles of at most 128 x 128 (x D <= 128)
// keep the operands in L2. Measured on one AVX-512 core (Eigen GEMM peak ~100 GFLOP/s), f32,
// T = 1024, D = 64: forward ~65 GFLOP/s, backward ~75 GFLOP/s (counting its 7 GEMMs).
//
// Backward recomputes P = exp(S - lse) per tile, with D_i = rowsum(dO_i * O_i):
//   dV += P^T dO;  dP = dO V^T;  dS = P * (dP - D_i);  dK += scale dS^T Q;  dQ += scale dS K.
// It runs as two passes: one parallel over (b, kv head, key tile) owning dK and dV (it loops
// over every query tile and every query head of the group, so GQA sums in a fixed order), one
// parallel over (b, head, query tile) owning dQ. Every output row has exactly one owner that
// adds its terms in a fixed order, so results are identical for any thread count, without
// atomics or per-thread copies. The price is recomputing S and dP for dQ: 7 GEMMs instead of
// 5; the alternative of one pass over (b, kv head) would leave cores idle whenever B * Hkv is
// small.
//
// Scheduling: tasks go out dynamically, longest first (late query tiles, early key tiles), to
// balance the triangular work; since tasks own disjoint outputs, the schedule never changes
// the bits. bf16/f16 tiles are converted to f32 on load; f64 computes in f64.

#include <omp.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "tessera/core/detail/element_convert.h"
#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/parallel.h"
#include "tessera/core/empty.h"

namespace tessera {

namespace {

// Rows per query and key tile. Larger tiles amortise Eigen's operand packing, smaller ones
// waste less of the half-masked diagonal tiles. Measured (f32, D = 64, one thread, forward +
// backward): 128 beats 64 by 9% at T = 512 and 17% at T = 1024; 64 wins at T = 256. A
// function of the shape only, so the choice never depends on the thread count.
int64_t tile_rows(int64_t Tk) {
  return Tk >= 512 ? 128 : 64;
}

template <class A>
using RowMat = Eigen::Matrix<A, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class A>
using MatMap = Eigen::Map<RowMat<A>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <class A>
using ConstMatMap = Eigen::Map<const RowMat<A>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <class A>
MatMap<A> tile(A* p, int64_t rows, int64_t cols) {
  return MatMap<A>(p, rows, cols, Eigen::OuterStride<>(cols));
}

// Element access to a [B, H, T, D] tensor whose D stride is 1.
template <class T>
struct Heads {
  T* data;
  int64_t sb, sh, st;
  Heads(const Tensor& x, const char* op)
      : data(x.data<T>(op)), sb(x.stride(0)), sh(x.stride(1)), st(x.stride(2)) {}
  T* row(int64_t b, int64_t h, int64_t t) const { return data + b * sb + h * sh + t * st; }
};

// Rows [r0, r0 + n) of head (b, h) as an A matrix: a view when T is A, else converted into buf.
template <class A, class T>
ConstMatMap<A> load_rows(const Heads<T>& x, int64_t b, int64_t h, int64_t r0, int64_t n, int64_t D,
                         A* buf) {
  const T* p = x.row(b, h, r0);
  if constexpr (std::is_same_v<T, A>) {
    return ConstMatMap<A>(p, n, D, Eigen::OuterStride<>(x.st));
  } else {
    for (int64_t r = 0; r < n; ++r)
      for (int64_t d = 0; d < D; ++d) buf[r * D + d] = element::load(p + r * x.st + d);
    return ConstMatMap<A>(buf, n, D, Eigen::OuterStride<>(D));
  }
}

// x rows [r0, r0 + n) of head (b, h) = factor * src (contiguous [n, D]).
template <class T, class A>
void store_rows(const Heads<T>& x, int64_t b, int64_t h, int64_t r0, int64_t n, int64_t D,
                const A* src, A factor) {
  for (int64_t r = 0; r < n; ++r) {
    T* p = x.row(b, h, r0 + r);
    for (int64_t d = 0; d < D; ++d) element::store(p + d, src[r * D + d] * factor);
  }
}

// How many keys of the tile starting at key j0 (of nk keys) the query at position pos sees.
inline int64_t visible(int64_t pos, int64_t j0, int64_t nk) {
  return std::clamp<int64_t>(pos - j0 + 1, 0, nk);
}

// Runs f(task, thread) for every task in [0, n), handed out dynamically. Tasks must own
// disjoint outputs; `thread` indexes a per-thread workspace of threads_for(n) slots.
int threads_for(int64_t n) {
  if (omp_in_parallel()) return 1;
  return int(std::clamp<int64_t>(n, 1, omp_get_max_threads()));
}

template <class F>
void run_tasks(int64_t n, F&& f) {
  const int threads = threads_for(n);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t t = 0; t < n; ++t) f(t, omp_get_thread_num());
}

// One contiguous workspace with a fixed-size slot per thread, carved into tiles. Allocated
// through Tessera's allocator so memory accounting sees it.
template <class A>
class Workspace {
 public:
  Workspace(int threads, int64_t per_thread)
      : per_thread_((per_thread + 15) / 16 * 16),
        buffer_(empty(Shape{threads * per_thread_}, dtype_of<A>)),
        base_(buffer_.data<A>("attention workspace")) {}
  A* slot(int thread) const { return base_ + thread * per_thread_; }

 private:
  int64_t per_thread_;
  Tensor buffer_;
  A* base_;
};

// Turns the rows of a score tile S = Q K^T (queries from position pos0) into probabilities
// P = exp(scale * S - lse) in place, zero where masked.
template <class A>
void probabilities(MatMap<A>& s, int64_t pos0, int64_t j0, A scale, const A* lse) {
  const int64_t nk = s.cols();
  for (int64_t r = 0; r < s.rows(); ++r) {
    const int64_t n = visible(pos0 + r, j0, nk);
    auto row = s.row(r);
    row.head(n) = (row.head(n).array() * scale - lse[r]).exp();
    row.tail(nk - n).setZero();
  }
}

template <class T>
void forward_impl(const Tensor& q, const Tensor& k, const Tensor& v, double scale_d,
                  const Tensor& out, const Tensor& lse) {
  using A = acc_type_t<T>;
  const char* op = "attention";
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), Tk = k.size(2), group = H / Hkv, shift = Tk - Tq;
  const int64_t bq = tile_rows(Tk), bk = bq;
  const int64_t nqb = (Tq + bq - 1) / bq;
  const Heads<T> Q(q, op), K(k, op), V(v, op), O(out, op);
  A* L = lse.data<A>(op);
  const A scale = A(scale_d);
  // Slot: q, k, v tiles (converted), scores, output accumulator, m, l.
  const int64_t n_tasks = B * H * nqb;
  const Workspace<A> ws(threads_for(n_tasks), (bq + 2 * bk) * D + bq * bk + bq * D + 2 * bq);
  run_tasks(n_tasks, [&](int64_t task, int thread) {
    const int64_t bh = task % (B * H), qb = nqb - 1 - task / (B * H);
    const int64_t b = bh / H, h = bh % H, hk = h / group;
    const int64_t i0 = qb * bq, nq = std::min(bq, Tq - i0), pos0 = shift + i0;
    A* qbuf = ws.slot(thread);
    A* kbuf = qbuf + bq * D;
    A* vbuf = kbuf + bk * D;
    A* sbuf = vbuf + bk * D;
    A* abuf = sbuf + bq * bk;
    A* m = abuf + bq * D;
    A* l = m + bq;
    auto Qm = load_rows<A>(Q, b, h, i0, nq, D, qbuf);
    MatMap<A> acc = tile(abuf, nq, D);
    acc.setZero();
    std::fill(m, m + nq, -std::numeric_limits<A>::infinity());
    std::fill(l, l + nq, A(0));
    for (int64_t j0 = 0; j0 < pos0 + nq; j0 += bk) {
      const int64_t nk = std::min(bk, Tk - j0);
      auto Km = load_rows<A>(K, b, hk, j0, nk, D, kbuf);
      auto Vm = load_rows<A>(V, b, hk, j0, nk, D, vbuf);
      MatMap<A> s = tile(sbuf, nq, nk);
      s.noalias() = Qm * Km.transpose();
      for (int64_t r = 0; r < nq; ++r) {
        const int64_t n = visible(pos0 + r, j0, nk);
        auto row = s.row(r);
        row.tail(nk - n).setZero();
        if (n == 0) continue;  // a tile wholly in this row's future: nothing changes
        const A m_new = std::max(m[r], row.head(n).maxCoeff() * scale);
        const A alpha = std::exp(m[r] - m_new);  // 0 on the first tile (m = -inf)
        row.head(n) = (row.head(n).array() * scale - m_new).exp();
        l[r] = l[r] * alpha + row.head(n).sum();
        m[r] = m_new;
        if (alpha != A(1)) acc.row(r) *= alpha;
      }
      acc.noalias() += s * Vm;
    }
    for (int64_t r = 0; r < nq; ++r) {
      store_rows(O, b, h, i0 + r, 1, D, abuf + r * D, A(1) / l[r]);
      L[bh * Tq + i0 + r] = m[r] + std::log(l[r]);
    }
  });
}

template <class T>
void backward_impl(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                   const Tensor& lse, const Tensor& gout, double scale_d, const Tensor& gq,
                   const Tensor& gk, const Tensor& gv) {
  using A = acc_type_t<T>;
  const char* op = "attention backward";
  const int64_t B = q.size(0), H = q.size(1), Tq = q.size(2), D = q.size(3);
  const int64_t Hkv = k.size(1), Tk = k.size(2), group = H / Hkv, shift = Tk - Tq;
  const int64_t bq = tile_rows(Tk), bk = bq;
  const int64_t nqb = (Tq + bq - 1) / bq, nkb = (Tk + bk - 1) / bk;
  const Heads<T> Q(q, op), K(k, op), V(v, op), O(out, op), dO(gout, op);
  const Heads<T> dQ(gq, op), dK(gk, op), dV(gv, op);
  const A* L = lse.data<A>(op);
  const A scale = A(scale_d);

  // D_i = rowsum(dO_i * O_i), one value per query row.
  Tensor delta_t = empty(Shape{B * H * Tq}, dtype_of<A>);
  A* delta = delta_t.data<A>(op);
  cpu::parallel_for(B * H * Tq, std::max<int64_t>(1, 4096 / D), [&](int64_t lo, int64_t hi) {
    for (int64_t row = lo; row < hi; ++row) {
      const int64_t bh = row / Tq, i = row % Tq;
      const T* o = O.row(bh / H, bh % H, i);
      const T* g = dO.row(bh / H, bh % H, i);
      A sum = 0;
      for (int64_t d = 0; d < D; ++d) sum += element::load(o + d) * element::load(g + d);
      delta[row] = sum;
    }
  });

  // Slot: q, dO, k, v tiles (converted), P and dP tiles, two accumulators (dK and dV in pass
  // 1, dQ in pass 2).
  const int64_t acc_rows = std::max(bq, bk);
  const int64_t slot = 2 * bq * D + 2 * bk * D + 2 * bq * bk + 2 * acc_rows * D;
  const Workspace<A> ws(std::max(threads_for(B * Hkv * nkb), threads_for(B * H * nqb)), slot);
  struct Tiles {
    A *q, *go, *k, *v, *p, *dp, *acc1, *acc2;
  };
  auto tiles = [&](int thread) {
    Tiles t;
    t.q = ws.slot(thread);
    t.go = t.q + bq * D;
    t.k = t.go + bq * D;
    t.v = t.k + bk * D;
    t.p = t.v + bk * D;
    t.dp = t.p + bq * bk;
    t.acc1 = t.dp + bq * bk;
    t.acc2 = t.acc1 + acc_rows * D;
    return t;
  };
  // P and dS = P * (dP - D_i) for query tile (b, h, i0, nq) against the key tile at j0 whose
  // rows are Km, Vm; P is left in t.p and dS in t.dp.
  auto tile_grads = [&](const Tiles& t, const ConstMatMap<A>& Qm, const ConstMatMap<A>& Gm,
                        const ConstMatMap<A>& Km, const ConstMatMap<A>& Vm, int64_t bh, int64_t i0,
                        int64_t j0) {
    const int64_t nq = Qm.rows(), nk = Km.rows();
    MatMap<A> p = tile(t.p, nq, nk), dp = tile(t.dp, nq, nk);
    p.noalias() = Qm * Km.transpose();
    probabilities(p, shift + i0, j0, scale, L + bh * Tq + i0);
    dp.noalias() = Gm * Vm.transpose();
    for (int64_t r = 0; r < nq; ++r)
      dp.row(r) = p.row(r).array() * (dp.row(r).array() - delta[bh * Tq + i0 + r]);
  };

  // Pass 1: dK and dV, one task per (b, kv head, key tile).
  run_tasks(B * Hkv * nkb, [&](int64_t task, int thread) {
    const Tiles t = tiles(thread);
    const int64_t bhk = task % (B * Hkv), kb = task / (B * Hkv);
    const int64_t b = bhk / Hkv, hk = bhk % Hkv;
    const int64_t j0 = kb * bk, nk = std::min(bk, Tk - j0);
    auto Km = load_rows<A>(K, b, hk, j0, nk, D, t.k);
    auto Vm = load_rows<A>(V, b, hk, j0, nk, D, t.v);
    MatMap<A> gk_acc = tile(t.acc1, nk, D), gv_acc = tile(t.acc2, nk, D);
    gk_acc.setZero();
    gv_acc.setZero();
    // The first query tile with a query that sees key j0.
    const int64_t first_q = std::max<int64_t>(0, j0 - shift) / bq * bq;
    for (int64_t h = hk * group; h < (hk + 1) * group; ++h) {
      for (int64_t i0 = first_q; i0 < Tq; i0 += bq) {
        const int64_t nq = std::min(bq, Tq - i0);
        auto Qm = load_rows<A>(Q, b, h, i0, nq, D, t.q);
        auto Gm = load_rows<A>(dO, b, h, i0, nq, D, t.go);
        tile_grads(t, Qm, Gm, Km, Vm, b * H + h, i0, j0);
        gv_acc.noalias() += tile(t.p, nq, nk).transpose() * Gm;
        gk_acc.noalias() += tile(t.dp, nq, nk).transpose() * Qm;
      }
    }
    store_rows(dK, b, hk, j0, nk, D, t.acc1, scale);
    store_rows(dV, b, hk, j0, nk, D, t.acc2, A(1));
  });

  // Pass 2: dQ, one task per (b, head, query tile).
  run_tasks(B * H * nqb, [&](int64_t task, int thread) {
    const Tiles t = tiles(thread);
    const int64_t bh = task % (B * H), qb = nqb - 1 - task / (B * H);
    const int64_t b = bh / H, h = bh % H, hk = h / group;
    const int64_t i0 = qb * bq, nq = std::min(bq, Tq - i0);
    auto Qm = load_rows<A>(Q, b, h, i0, nq, D, t.q);
    auto Gm = load_rows<A>(dO, b, h, i0, nq, D, t.go);
    MatMap<A> gq_acc = tile(t.acc1, nq, D);
    gq_acc.setZero();
    for (int64_t j0 = 0; j0 < shift + i0 + nq; j0 += bk) {
      const int64_t nk = std::min(bk, Tk - j0);
      auto Km = load_rows<A>(K, b, hk, j0, nk, D, t.k);
      auto Vm = load_rows<A>(V, b, hk, j0, nk, D, t.v);
      tile_grads(t, Qm, Gm, Km, Vm, bh, i0, j0);
      gq_acc.noalias() += tile(t.dp, nq, nk) * Km;
    }
    store_rows(dQ, b, h, i0, nq, D, t.acc1, scale);
  });
}

// The kernels read and write rows of D contiguous elements (the front end arranges it).
void check_rows(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors)
    TESSERA_ASSERT(t->size(3) <= 1 || t->stride(3) == 1, "attention: ", t->describe(),
                   " needs unit stride in D");
}

}  // namespace

void CpuBackend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                   const Tensor& out, const Tensor& lse) {
  check_rows({&q, &k, &v, &out});
  dispatch_floating(q.dtype(), "attention",
                    [&]<class T>() { forward_impl<T>(q, k, v, scale, out, lse); });
}

void CpuBackend::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& out, const Tensor& lse, const Tensor& gout,
                                    double scale, const Tensor& gq, const Tensor& gk,
                                    const Tensor& gv) {
  check_rows({&q, &k, &v, &out, &gout, &gq, &gk, &gv});
  dispatch_floating(q.dtype(), "attention backward", [&]<class T>() {
    backward_impl<T>(q, k, v, out, lse, gout, scale, gq, gk, gv);
  });
}

}  // namespace tessera
