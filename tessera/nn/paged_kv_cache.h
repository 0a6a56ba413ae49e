#pragma once
// The paged KV cache of serving (vLLM's PagedAttention): each layer's keys and values live in
// one pool of fixed-size blocks, [num_blocks, block_size, Hkv, D], and a sequence owns the
// blocks its block table lists. Memory grows a block at a time, so a sequence wastes less than
// one block, where a contiguous cache reserves block_size positions for every sequence.
//
//          pool (per layer)                block tables (one row per running sequence)
//   block 0 [ s1 p16..31      ]            s0: 2 5 -1        positions 0..15 in block 2,
//   block 1 [ free            ]            s1: 4 0 3         16..31 in block 5, ...
//   block 2 [ s0 p0..15       ]
//   ...
//
// This class holds the pools; which block belongs to whom is the caller's bookkeeping (the
// serving scheduler, serve::BlockAllocator). A PagedBatch describes one iteration: segments
// of consecutive tokens of some sequences (one token of a decoding sequence, a chunk of a
// prefilling one), their block tables, and the per-token indices paged_attention reads.

#include <cstdint>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/nn/gpt_config.h"

namespace tessera::nn {

// One layer's pools, [num_blocks, block_size, Hkv, D] each; keys are stored after RoPE.
struct PagedLayerKV {
  Tensor k, v;
};

class PagedKVCache {
 public:
  // Pools of num_blocks blocks of block_size positions for every layer of `config`, for the
  // n_kv_head / tp_size heads of one tensor-parallel rank. Throws naming a non-positive size.
  PagedKVCache(const GPTConfig& config, int64_t num_blocks, int64_t block_size,
               DType dtype = DType::f32, int tp_size = 1, Device device = Device::cpu());

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t num_layers() const { return int64_t(layers_.size()); }
  int64_t kv_heads() const { return kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  // Bytes of one block across every layer's keys and values (what a sequence pays per block).
  int64_t bytes_per_block() const;
  PagedLayerKV& layer(int64_t i);

 private:
  std::vector<PagedLayerKV> layers_;
  int64_t num_blocks_, block_size_, kv_heads_, head_dim_;
  DType dtype_;
  Device device_;
};

// One serving iteration's tokens, in segment order.
struct PagedBatch {
  struct Segment {
    int64_t row = 0;     // the sequence's row in `tables`
    int64_t start = 0;   // the position of the segment's first token
    int64_t length = 0;  // consecutive tokens from there
  };
  std::vector<Segment> segments;
  // Row r: the pool blocks of sequence r, in position order (block j holds positions
  // j * block_size ..); each row covers at least its segments' last position.
  std::vector<std::vector<int32_t>> tables;
  // Built by make_paged_batch on the cache's device: block_tables [rows, max_blocks] (rows
  // padded with -1), token_row and token_pos [N] i32.
  Tensor block_tables, token_row, token_pos;

  int64_t num_tokens() const;
};

// Validates segments and tables against the cache (a row outside the tables, a position past
// a row's blocks or past block_size of the model, a block outside the pool, a second segment of
// one row) naming the offending segment, then builds the index tensors.
PagedBatch make_paged_batch(std::vector<PagedBatch::Segment> segments,
                            std::vector<std::vector<int32_t>> tables, const PagedKVCache& cache,
                            int64_t max_position);

// Writes the batch's keys and values, k and v [N, Hkv, D] (token order), into their blocks:
// one copy per (segment, block) run of consecutive positions.
void write_paged_kv(PagedLayerKV& pool, const PagedBatch& batch, const Tensor& k, const Tensor& v);

}  // namespace tessera::nn
