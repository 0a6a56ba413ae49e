#include "tessera/serve/block_allocator.h"

#include "tessera/core/error.h"

namespace tessera::serve {

BlockAllocator::BlockAllocator(int64_t num_blocks, int64_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size) {
  TESSERA_CHECK(num_blocks > 0 && num_blocks <= INT32_MAX,
                "BlockAllocator: the number of blocks must be in [1, 2^31), got ", num_blocks);
  TESSERA_CHECK(block_size > 0, "BlockAllocator: the block size must be positive, got ",
                block_size);
  // Block 0 on top of the stack: a fresh pool hands out 0, 1, 2, ...
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));
}

int64_t BlockAllocator::blocks_for(int64_t positions) const {
  return (positions + block_size_ - 1) / block_size_;
}

bool BlockAllocator::grow(std::vector<int32_t>& table, int64_t positions) {
  const int64_t need = blocks_for(positions) - int64_t(table.size());
  if (need <= 0) return true;
  if (need > free_blocks()) return false;
  for (int64_t i = 0; i < need; ++i) {
    table.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void BlockAllocator::release(std::vector<int32_t>& table) {
  // In reverse, so that a sequence admitted next reuses the blocks in the same order.
  for (auto it = table.rbegin(); it != table.rend(); ++it) free_.push_back(*it);
  table.clear();
}

}  // namespace tessera::serve
