#include "tessera/nn/paged_kv_cache.h"

#include <algorithm>
#include <set>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"

namespace tessera::nn {

PagedKVCache::PagedKVCache(const GPTConfig& config, int64_t num_blocks, int64_t block_size,
                           DType dtype, int tp_size, Device device)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      kv_heads_(config.n_kv_head / std::max(tp_size, 1)),
      head_dim_(config.head_dim()),
      dtype_(dtype),
      device_(device) {
  config.validate();
  TESSERA_CHECK(tp_size >= 1 && config.n_kv_head % tp_size == 0, "PagedKVCache: n_kv_head (",
                config.n_kv_head, ") must be divisible by the tensor-parallel size (", tp_size,
                ")");
  TESSERA_CHECK(num_blocks > 0, "PagedKVCache: the number of blocks must be positive, got ",
                num_blocks);
  TESSERA_CHECK(block_size > 0, "PagedKVCache: the block size must be positive, got ", block_size);
  TESSERA_CHECK(is_floating(dtype), "PagedKVCache: dtype must be floating, got ",
                dtype_name(dtype));
  const Shape shape{num_blocks, block_size, kv_heads_, head_dim_};
  for (int64_t i = 0; i < config.n_layer; ++i)
    layers_.push_back({zeros(shape, dtype, device), zeros(shape, dtype, device)});
}

int64_t PagedKVCache::bytes_per_block() const {
  return 2 * num_layers() * block_size_ * kv_heads_ * head_dim_ * int64_t(dtype_size(dtype_));
}

PagedLayerKV& PagedKVCache::layer(int64_t i) {
  TESSERA_CHECK(i >= 0 && i < num_layers(), "PagedKVCache: layer ", i, " is outside [0, ",
                num_layers(), ")");
  return layers_[size_t(i)];
}

int64_t PagedBatch::num_tokens() const {
  int64_t n = 0;
  for (const Segment& s : segments) n += s.length;
  return n;
}

PagedBatch make_paged_batch(std::vector<PagedBatch::Segment> segments,
                            std::vector<std::vector<int32_t>> tables, const PagedKVCache& cache,
                            int64_t max_position) {
  TESSERA_CHECK(!segments.empty(), "PagedBatch: an iteration needs at least one segment");
  const int64_t rows = int64_t(tables.size()), bs = cache.block_size();
  size_t max_blocks = 1;
  for (const auto& row : tables) max_blocks = std::max(max_blocks, row.size());
  std::vector<int32_t> flat(size_t(rows) * max_blocks, -1), token_row, token_pos;
  for (int64_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < tables[size_t(r)].size(); ++j) {
      const int32_t b = tables[size_t(r)][j];
      TESSERA_CHECK(b >= 0 && b < cache.num_blocks(), "PagedBatch: row ", r, "'s block ", j, " is ",
                    b, ", outside the pool of ", cache.num_blocks(), " blocks");
      flat[size_t(r) * max_blocks + j] = b;
    }
  std::set<int64_t> rows_seen;
  for (size_t i = 0; i < segments.size(); ++i) {
    const PagedBatch::Segment& s = segments[i];
    TESSERA_CHECK(s.row >= 0 && s.row < rows, "PagedBatch: segment ", i, " names row ", s.row,
                  ", outside the ", rows, " block tables");
    TESSERA_CHECK(s.start >= 0 && s.length > 0 && s.start + s.length <= max_position,
                  "PagedBatch: segment ", i, " (positions ", s.start, " .. ",
                  s.start + s.length - 1, ") must be non-empty and inside [0, ", max_position, ")");
    const int64_t have = int64_t(tables[size_t(s.row)].size()) * bs;
    TESSERA_CHECK(s.start + s.length <= have, "PagedBatch: segment ", i, " ends at position ",
                  s.start + s.length - 1, " but row ", s.row, " has ", have, " positions (",
                  tables[size_t(s.row)].size(), " blocks of ", bs, ")");
    TESSERA_CHECK(rows_seen.insert(s.row).second, "PagedBatch: segment ", i,
                  " is the second one of row ", s.row,
                  "; one iteration takes one segment per sequence");
    for (int64_t p = s.start; p < s.start + s.length; ++p) {
      token_row.push_back(int32_t(s.row));
      token_pos.push_back(int32_t(p));
    }
  }
  PagedBatch batch;
  batch.segments = std::move(segments);
  batch.tables = std::move(tables);
  const int64_t n = int64_t(token_row.size());
  batch.block_tables = from_vector<int32_t>(flat, Shape{rows, int64_t(max_blocks)}, cache.device());
  batch.token_row = from_vector<int32_t>(token_row, Shape{n}, cache.device());
  batch.token_pos = from_vector<int32_t>(token_pos, Shape{n}, cache.device());
  return batch;
}

void write_paged_kv(PagedLayerKV& pool, const PagedBatch& batch, const Tensor& k, const Tensor& v) {
  const int64_t bs = pool.k.size(1);
  TESSERA_CHECK(k.dim() == 3 && k.size(0) == batch.num_tokens() && k.shape() == v.shape() &&
                    k.size(1) == pool.k.size(2) && k.size(2) == pool.k.size(3),
                "write_paged_kv: keys ", k.describe(), " and values ", v.describe(), " must be [",
                batch.num_tokens(), ", ", pool.k.size(2), ", ", pool.k.size(3), "] for the pool ",
                pool.k.describe());
  int64_t token = 0;
  for (const PagedBatch::Segment& s : batch.segments) {
    const std::vector<int32_t>& table = batch.tables[size_t(s.row)];
    for (int64_t p = s.start; p < s.start + s.length;) {
      const int64_t offset = p % bs, run = std::min(bs - offset, s.start + s.length - p);
      const int64_t block = table[size_t(p / bs)];
      ops::copy_(ops::narrow(ops::select(pool.k, 0, block), 0, offset, run),
                 ops::narrow(k, 0, token, run));
      ops::copy_(ops::narrow(ops::select(pool.v, 0, block), 0, offset, run),
                 ops::narrow(v, 0, token, run));
      p += run;
      token += run;
    }
  }
}

}  // namespace tessera::nn
