#pragma once
// BlockAllocator: who owns which block of the paged KV cache (nn/paged_kv_cache.h). A sequence's
// block table grows a block at a time as its positions fill, and goes back to the free list
// whole when it finishes, is cancelled or is preempted. Free blocks are handed out last-in,
// first-out, so a run's block assignment is a pure function of its requests.

#include <cstdint>
#include <vector>

namespace tessera::serve {

class BlockAllocator {
 public:
  // Throws naming a non-positive size.
  BlockAllocator(int64_t num_blocks, int64_t block_size);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  int64_t free_blocks() const { return int64_t(free_.size()); }
  int64_t used_blocks() const { return num_blocks_ - free_blocks(); }
  // Blocks that hold `positions` positions.
  int64_t blocks_for(int64_t positions) const;

  // Grows `table` to hold `positions` positions. When the free list is too short it changes
  // nothing and returns false.
  bool grow(std::vector<int32_t>& table, int64_t positions);
  // Returns every block of `table` to the free list and clears it.
  void release(std::vector<int32_t>& table);

 private:
  int64_t num_blocks_, block_size_;
  std::vector<int32_t> free_;  // a stack: the last freed block is the next handed out
};

}  // namespace tessera::serve
