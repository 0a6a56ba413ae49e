// The paged-attention launcher on the device under test, against the CPU backend on the same
// buffers: decode tokens and prefill chunks of sequences whose blocks are scattered through the
// pool, lengths past one 128-key tile, GQA, a head slice of a fused projection as q, every
// floating dtype; and the operand checks.

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "tests/cuda/device_kernels.h"
#include "tests/cuda/kernel_compare.h"
#include "tests/cuda/mirror_tensor.h"
#include "tests/cuda/sim_test_util.h"

namespace tessera::cuda {
namespace {

using testing::cpu_backend;
using testing::device_copy;
using testing::expect_near;
using testing::kernels;
using testing::Mirror;
using testing::mirror;

// Tolerances against the CPU. Both accumulate in the compute type, the CPU key by key and the
// device a 128-key tile at a time (its max and sum reduced in a tree), so the exp rescalings
// and the sums round differently: f32 1e-5 relative on outputs of size ~2 (convex combinations
// of values in [-2, 2)). f64 1e-12. bf16 / f16: the final rounding of an f32 result that
// differed in its last bits can flip, one ulp (2^-8 / 2^-11, doubled).
double rtol_for(DType dtype) {
  return testing::rtol_by_dtype(dtype, 1e-5, 1e-12);
}

struct Batch {
  Tensor tables, seq, pos;
  int64_t N = 0, blocks = 0;
};

// S sequences of the given lengths in blocks of `bs`, shuffled through the pool; each
// contributes its last `chunk` positions as tokens.
Batch make_batch(const std::vector<int64_t>& lengths, int64_t bs, int64_t chunk, uint64_t seed) {
  Batch b;
  int64_t max_blocks = 0;
  for (int64_t n : lengths) {
    max_blocks = std::max(max_blocks, (n + bs - 1) / bs);
    b.blocks += (n + bs - 1) / bs;
  }
  b.blocks += 2;
  std::vector<int32_t> order(static_cast<size_t>(b.blocks));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  const int64_t S = int64_t(lengths.size());
  std::vector<int32_t> tables(static_cast<size_t>(S * max_blocks), -1), seq, pos;
  size_t next = 0;
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t k = 0; k < (lengths[size_t(s)] + bs - 1) / bs; ++k)
      tables[size_t(s * max_blocks + k)] = order[next++];
    for (int64_t p = std::max<int64_t>(0, lengths[size_t(s)] - chunk); p < lengths[size_t(s)];
         ++p) {
      seq.push_back(int32_t(s));
      pos.push_back(int32_t(p));
    }
  }
  b.N = int64_t(seq.size());
  b.tables = device_copy(from_vector<int32_t>(tables, Shape{S, max_blocks}));
  b.seq = device_copy(from_vector<int32_t>(seq, Shape{b.N}));
  b.pos = device_copy(from_vector<int32_t>(pos, Shape{b.N}));
  return b;
}

Tensor host_of(const Tensor& t) {
  return testing::to_host(t);
}

TEST(PagedAttentionKernels, MatchCpu) {
  struct Case {
    const char* name;
    std::vector<int64_t> lengths;
    int64_t bs, chunk, H, Hkv, D;
    bool fused_q;
  };
  const Case cases[] = {
      {"decode, GQA", {1, 37, 130}, 16, 1, 4, 2, 16, false},
      {"prefill chunks past a tile", {200, 5}, 7, 9, 2, 1, 24, true},
      {"odd D, one head", {129}, 3, 2, 1, 1, 5, false},
  };
  uint64_t seed = 1;
  for (const Case& c : cases)
    for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      const std::string what = str_cat("paged_attention ", c.name, " ", dtype_name(dtype));
      const Batch b = make_batch(c.lengths, c.bs, c.chunk, seed++);
      const int64_t width = c.fused_q ? c.H + 2 * c.Hkv : c.H;
      Mirror qbuf = mirror(Shape{b.N, width, c.D}, dtype, seed++);
      const Tensor qh = ops::narrow(qbuf.host, 1, 0, c.H), qd = ops::narrow(qbuf.dev, 1, 0, c.H);
      Mirror k = mirror(Shape{b.blocks, c.bs, c.Hkv, c.D}, dtype, seed++);
      Mirror v = mirror(Shape{b.blocks, c.bs, c.Hkv, c.D}, dtype, seed++);
      Mirror out = mirror(Shape{b.N, c.H, c.D}, dtype, seed++);
      cpu_backend().paged_attention(qh, k.host, v.host, host_of(b.tables), host_of(b.seq),
                                    host_of(b.pos), 0.3, out.host);
      kernels().paged_attention(qd, k.dev, v.dev, b.tables, b.seq, b.pos, 0.3, out.dev);
      expect_near(out, rtol_for(dtype), rtol_for(dtype), what);
    }
}

TEST(PagedAttentionKernels, RejectsBadOperands) {
  const Batch b = make_batch({4}, 4, 1, 9);
  Mirror q = mirror(Shape{b.N, 3, 8}, DType::f32, 1);  // 3 heads over 2 kv heads
  Mirror k = mirror(Shape{b.blocks, 4, 2, 8}, DType::f32, 2);
  Mirror out = mirror(Shape{b.N, 3, 8}, DType::f32, 3);
  testing::expect_error(
      [&] { kernels().paged_attention(q.dev, k.dev, k.dev, b.tables, b.seq, b.pos, 1.0, out.dev); },
      {"cuda paged_attention", "H % Hkv == 0"});
  Mirror q64 = mirror(Shape{b.N, 2, 8}, DType::f64, 4),
         out2 = mirror(Shape{b.N, 2, 8}, DType::f64, 5);
  testing::expect_error(
      [&] {
        kernels().paged_attention(q64.dev, k.dev, k.dev, b.tables, b.seq, b.pos, 1.0, out2.dev);
      },
      {"cuda paged_attention", "of q's dtype"});
}

}  // namespace
}  // namespace tessera::cuda
