// Paged attention on the CPU: for each (token, head), an online softmax over the token's
// sequence's keys 0..p, each key row found through the block table. Bound: memory. A token at
// position p reads (p + 1) key and value rows of D elements from wherever their blocks lie
// (2 (p + 1) D reads, 4 (p + 1) D FLOPs), so a decode step is one pass over every running
// sequence's cache; a prefill chunk re-reads the prefix once per new token (the GPU kernel does
// the same; prefill is the cheaper share of serving).
//
// Order: keys in position order, accumulated in the compute type (f32 for f32/bf16/f16, f64 for
// f64) with a running max and sum, one owner per (token, head): the result depends neither on
// the thread count nor on where the blocks lie in the pool.

#include <cmath>
#include <limits>
#include <vector>

#include "tessera/core/cpu/cpu_backend.h"
#include "tessera/core/cpu/parallel.h"
#include "tessera/core/detail/element_convert.h"

namespace tessera {

void CpuBackend::paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                                 const Tensor& block_tables, const Tensor& token_seq,
                                 const Tensor& token_pos, double scale, const Tensor& out) {
  const char* op = "paged_attention";
  const int64_t N = q.size(0), H = q.size(1), D = q.size(2);
  const int64_t bs = k_cache.size(1), Hkv = k_cache.size(2), group = H / Hkv;
  const int64_t max_blocks = block_tables.size(1);
  const int64_t qn = q.stride(0), qh = q.stride(1);
  const int32_t* tables = block_tables.data<int32_t>(op);
  const int32_t* seq = token_seq.data<int32_t>(op);
  const int32_t* pos = token_pos.data<int32_t>(op);
  dispatch_floating(q.dtype(), op, [&]<class T>() {
    using A = acc_type_t<T>;
    const T* qp = q.data<T>(op);
    const T* kp = k_cache.data<T>(op);
    const T* vp = v_cache.data<T>(op);
    T* o = out.data<T>(op);
    cpu::parallel_for(N * H, std::max<int64_t>(1, 64 / std::max<int64_t>(D / 16, 1)),
                      [&](int64_t lo, int64_t hi) {
                        std::vector<A> qv(static_cast<size_t>(D)), acc(static_cast<size_t>(D));
                        for (int64_t row = lo; row < hi; ++row) {
                          const int64_t n = row / H, h = row % H, hk = h / group;
                          const int32_t* table = tables + int64_t(seq[n]) * max_blocks;
                          const T* qrow = qp + n * qn + h * qh;
                          for (int64_t d = 0; d < D; ++d) qv[size_t(d)] = element::load(qrow + d);
                          std::fill(acc.begin(), acc.end(), A(0));
                          A m = -std::numeric_limits<A>::infinity(), l = 0;
                          for (int64_t j = 0; j <= pos[n]; ++j) {
                            const int64_t slot = (int64_t(table[j / bs]) * bs + j % bs) * Hkv + hk;
                            const T* krow = kp + slot * D;
                            const T* vrow = vp + slot * D;
                            A s = 0;
                            for (int64_t d = 0; d < D; ++d)
                              s += qv[size_t(d)] * element::load(krow + d);
                            s *= A(scale);
                            // Rescale what came before when the maximum moves; the new key's weight
                            // is exp(s - m).
                            if (s > m) {
                              const A c = std::exp(m - s);
                              l *= c;
                              for (int64_t d = 0; d < D; ++d) acc[size_t(d)] *= c;
                              m = s;
                            }
                            const A p = std::exp(s - m);
                            l += p;
                            for (int64_t d = 0; d < D; ++d)
                              acc[size_t(d)] += p * element::load(vrow + d);
                          }
                          T* orow = o + (n * H + h) * D;
                          for (int64_t d = 0; d < D; ++d)
                            orow[d] = element::convert<T>(acc[size_t(d)] / l);
                        }
                      });
  });
}

}  // namespace tessera
