// Front end of paged attention: shapes, dtypes and devices, and every index the kernel will
// follow, checked on the host before the backend runs.

#include "tessera/core/ops/paged_attention.h"

#include <cmath>

#include "tessera/core/detail/op_scope.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/detail/op_utils.h"
#include "tessera/core/ops/movement.h"

namespace tessera::ops {

using detail::backend;
using detail::check_defined;

Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const Tensor& block_tables, const Tensor& token_seq, const Tensor& token_pos,
                       double scale) {
  const OpScope scope("paged_attention");
  const char* op = "paged_attention";
  check_defined(op, q, "q");
  check_defined(op, k_cache, "k_cache");
  check_defined(op, v_cache, "v_cache");
  check_defined(op, block_tables, "block_tables");
  check_defined(op, token_seq, "token_seq");
  check_defined(op, token_pos, "token_pos");
  detail::check_same_device(op, {&q, &k_cache, &v_cache, &block_tables, &token_seq, &token_pos});
  detail::check_floating(op, q, "q");
  detail::check_dim(op, q, 3, "q [N, H, D]");
  detail::check_dim(op, k_cache, 4, "k_cache [blocks, block_size, Hkv, D]");
  const int64_t N = q.size(0), H = q.size(1), D = q.size(2);
  const int64_t blocks = k_cache.size(0), bs = k_cache.size(1), Hkv = k_cache.size(2);
  detail::check_shape(op, v_cache, k_cache.shape(), "v_cache");
  detail::check_dtype(op, k_cache, q.dtype(), "k_cache");
  detail::check_dtype(op, v_cache, q.dtype(), "v_cache");
  TESSERA_CHECK(k_cache.size(3) == D, op, ": k_cache ", k_cache.describe(),
                " must have q's head dimension D = ", D);
  TESSERA_CHECK(Hkv > 0 && H % Hkv == 0, op, ": q's ", H, " heads must be a multiple of the ",
                "cache's ", Hkv, " kv heads");
  TESSERA_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), op,
                ": k_cache and v_cache must be contiguous pools");
  detail::check_dim(op, block_tables, 2, "block_tables [S, max_blocks]");
  for (const Tensor* t : {&block_tables, &token_seq, &token_pos})
    TESSERA_CHECK(t->dtype() == DType::i32 && t->is_contiguous(), op, ": block_tables, ",
                  "token_seq and token_pos must be contiguous i32, got ", t->describe());
  detail::check_shape(op, token_seq, Shape{N}, "token_seq");
  detail::check_shape(op, token_pos, Shape{N}, "token_pos");
  const int64_t S = block_tables.size(0), max_blocks = block_tables.size(1);
  // Every index the kernel follows.
  const std::vector<int32_t> tables = to_vector<int32_t>(block_tables);
  const std::vector<int32_t> seq = to_vector<int32_t>(token_seq);
  const std::vector<int32_t> pos = to_vector<int32_t>(token_pos);
  for (int64_t n = 0; n < N; ++n) {
    TESSERA_CHECK(seq[size_t(n)] >= 0 && seq[size_t(n)] < S, op, ": token ", n,
                  " belongs to sequence ", seq[size_t(n)], ", outside the ", S,
                  " rows of block_tables");
    TESSERA_CHECK(pos[size_t(n)] >= 0 && pos[size_t(n)] / bs < max_blocks, op, ": token ", n,
                  " sits at position ", pos[size_t(n)], ", beyond the ", max_blocks, " blocks of ",
                  bs, " a sequence may have");
    for (int64_t b = 0; b <= pos[size_t(n)] / bs; ++b) {
      const int32_t id = tables[size_t(seq[size_t(n)] * max_blocks + b)];
      TESSERA_CHECK(id >= 0 && id < blocks, op, ": sequence ", seq[size_t(n)], "'s block ", b,
                    " is ", id, ", outside the pool of ", blocks, " (token ", n, " at position ",
                    pos[size_t(n)], " reads it)");
    }
  }
  Tensor out = empty(Shape{N, H, D}, q.dtype(), q.device());
  if (out.numel() == 0) return out;
  const Tensor qd = D <= 1 || q.stride(2) == 1 ? q : contiguous(q);
  backend(q).paged_attention(qd, k_cache, v_cache, block_tables, token_seq, token_pos,
                             scale > 0 ? scale : 1.0 / std::sqrt(double(D)), out);
  return out;
}

}  // namespace tessera::ops
