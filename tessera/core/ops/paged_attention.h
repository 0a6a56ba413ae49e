#pragma once
// Paged attention: attention for serving, where every sequence's keys and values live in
// fixed-size blocks of one shared pool and a per-sequence block table says which (vLLM's
// PagedAttention). One call serves a whole continuous-batching iteration: the new tokens of
// every running sequence (one each while decoding, a chunk while prefilling), each attending
// to its own sequence's cached keys up to its position.
//
//   k_cache, v_cache  [blocks, block_size, Hkv, D]: the pool, shared by every sequence
//   block_tables      [S, max_blocks] i32: sequence s's j-th key is in block
//                     block_tables[s][j / block_size], row j % block_size
//   token_seq, token_pos  [N] i32: token n belongs to sequence token_seq[n], at position
//                     token_pos[n]; it sees that sequence's keys 0..token_pos[n]
// The caller writes the new tokens' keys and values into the pool first (views of the blocks
// and a copy: nn::PagedKVCache does it).

#include "tessera/core/tensor.h"

namespace tessera::ops {

// q [N, H, D] (any strides, unit stride in D is fastest); returns [N, H, D] in q's dtype.
// scale <= 0 means 1/sqrt(D). Throws naming the operand and the offending index when a shape,
// dtype or device disagrees, or when an index is outside its range (a sequence past S, a
// position whose block is past max_blocks, a block id outside the pool): the kernel then never
// reads outside the pool.
Tensor paged_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                       const Tensor& block_tables, const Tensor& token_seq, const Tensor& token_pos,
                       double scale = 0.0);

}  // namespace tessera::ops
