// The basic layers: shapes, parameter names and layouts, init, and dropout's keying.

#include <gtest/gtest.h>

#include <cmath>

#include "nn/tiny_models.h"
#include "support/error_of.h"

namespace tessera::nn {
namespace {

std::vector<std::string> names_of(const StateDict& d) {
  std::vector<std::string> out;
  for (const auto& [n, t] : d) out.push_back(n);
  return out;
}

TEST(Linear, ComputesXWTransposePlusBias) {
  Linear lin(3, 2, true, InitSpec{11, 0.5});
  EXPECT_EQ(names_of(lin.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(lin.weight().shape(), (Shape{2, 3}));
  ops::copy_(lin.bias(), from_vector<float>({0.25f, -1.0f}, Shape{2}));
  Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, Shape{2, 2, 3});
  Tensor y = lin.forward(x);
  ASSERT_EQ(y.shape(), (Shape{2, 2, 2}));
  std::vector<float> w = to_vector<float>(lin.weight()), xv = to_vector<float>(x),
                     yv = to_vector<float>(y);
  const float b[2] = {0.25f, -1.0f};
  for (int r = 0; r < 4; ++r)
    for (int o = 0; o < 2; ++o) {
      double ref = b[o];
      for (int i = 0; i < 3; ++i) ref += double(xv[size_t(r * 3 + i)]) * w[size_t(o * 3 + i)];
      // Three f32 products of O(10) values: round-off ~1e-6 relative.
      EXPECT_NEAR(yv[size_t(r * 2 + o)], ref, 1e-5 * (1 + std::abs(ref)));
    }
  Linear no_bias(3, 2, false, InitSpec{11, 0.5});
  EXPECT_EQ(names_of(no_bias.named_parameters()), (std::vector<std::string>{"weight"}));
  EXPECT_FALSE(no_bias.bias().defined());
  // Same key, same weight: the draw depends on the key only.
  EXPECT_EQ(to_vector<float>(no_bias.weight()), w);
}

TEST(Embedding, PaddedRowsStartAtZero) {
  Embedding emb(8, 4, InitSpec{3, 1.0}, 5);
  std::vector<float> w = to_vector<float>(emb.weight());
  for (size_t i = 0; i < 20; ++i) EXPECT_NE(w[i], 0.0f) << i;
  for (size_t i = 20; i < 32; ++i) EXPECT_EQ(w[i], 0.0f) << i;
  Tensor out = emb.forward(from_vector<int64_t>({4, 0, 4}, Shape{3}));
  ASSERT_EQ(out.shape(), (Shape{3, 4}));
  std::vector<float> o = to_vector<float>(out);
  for (size_t c = 0; c < 4; ++c) {
    EXPECT_EQ(o[c], w[16 + c]);
    EXPECT_EQ(o[4 + c], w[c]);
  }
  EXPECT_THROW(emb.forward(from_vector<int64_t>({8}, Shape{1})), Error);
  EXPECT_THROW(Embedding(8, 4, InitSpec{}, 9), Error);
}

TEST(Norms, NamesAndInitialValues) {
  LayerNorm ln(6, true, 1e-5);
  EXPECT_EQ(names_of(ln.named_parameters()), (std::vector<std::string>{"weight", "bias"}));
  EXPECT_EQ(to_vector<float>(ln.named_parameters()[0].second), std::vector<float>(6, 1.0f));
  EXPECT_EQ(to_vector<float>(ln.named_parameters()[1].second), std::vector<float>(6, 0.0f));
  EXPECT_EQ(names_of(LayerNorm(6, false, 1e-5).named_parameters()),
            (std::vector<std::string>{"weight"}));
  RMSNorm rms(6, 1e-5);
  EXPECT_EQ(names_of(rms.named_parameters()), (std::vector<std::string>{"weight"}));
  // RMSNorm of a constant row with unit weight is 1 everywhere (eps shifts it by ~5e-6).
  std::vector<float> y = to_vector<float>(rms.forward(full(Shape{2, 6}, 3.0)));
  for (float v : y) EXPECT_NEAR(v, 1.0f, 1e-5f);
  EXPECT_THROW(LayerNorm(0, true, 1e-5), Error);
  EXPECT_THROW(RMSNorm(4, 0.0), Error);
}

TEST(Init, NormalStatisticsAndKeys) {
  // 2^20 draws: the sample std of N(0, 0.02) is within 0.02 * 3 / sqrt(2 * 2^20) ~ 4e-5 of
  // 0.02 at three sigma, and the mean within 0.02 * 3 / 2^10 ~ 6e-5 of 0.
  Tensor w = init_normal(Shape{1024, 1024}, InitSpec{param_key(5, "x.weight"), 0.02});
  const double mean = ops::mean(w).item<double>();
  const double var = ops::mean(ops::mul(w, w)).item<double>() - mean * mean;
  EXPECT_NEAR(mean, 0.0, 6e-5);
  EXPECT_NEAR(std::sqrt(var), 0.02, 4e-5);
  EXPECT_NE(param_key(5, "x.weight"), param_key(5, "y.weight"));
  EXPECT_NE(param_key(5, "x.weight"), param_key(6, "x.weight"));
  EXPECT_NE(mix_key({1, 2}), mix_key({2, 1}));
}

// A tensor-parallel rank draws only its slice, and gets exactly the elements shard_of takes from
// the whole draw: rows and columns, one segment or c_attn's three (of unequal sizes, as under
// GQA), odd widths, f32 and bf16, 1 to 4 ranks.
TEST(Init, AShardDrawsExactlyItsSliceOfTheWholeDraw) {
  struct Case {
    ShardKind shard;
    Shape full;
    std::vector<int64_t> segments;
  };
  const std::vector<Case> cases = {{ShardKind::rows, {12, 7}, {}},
                                   {ShardKind::cols, {5, 12}, {}},
                                   {ShardKind::rows, {24, 5}, {12, 4, 8}},
                                   {ShardKind::cols, {3, 24}, {12, 4, 8}}};
  for (const Case& c : cases)
    for (DType dtype : {DType::f32, DType::bf16})
      for (int size : {1, 2, 4}) {
        ParamMeta meta;
        meta.shard = c.shard;
        meta.segments = c.segments;
        const InitSpec spec{param_key(3, "h.0.attn.c_attn.weight"), 0.02, dtype};
        const Tensor whole = init_normal(c.full, spec);
        for (int r = 0; r < size; ++r) {
          const Tensor want = shard_of(whole, meta, r, size, "w");
          const Tensor got = init_normal_shard(c.full, spec, meta, r, size, "w");
          ASSERT_EQ(got.shape(), want.shape());
          EXPECT_EQ(to_vector<float>(ops::cast(got, DType::f32)),
                    to_vector<float>(ops::cast(want, DType::f32)))
              << c.full << " rank " << r << " of " << size << " " << dtype_name(dtype);
        }
      }
  ParamMeta rows;
  rows.shard = ShardKind::rows;
  rows.segments = {8, 6};  // 14 rows, not the tensor's 12
  EXPECT_NE(tessera::testing::error_of([&] {
              init_normal_shard(Shape{12, 4}, InitSpec{1}, rows, 0, 2, "w");
            }).find("init_normal_shard: 'w' [12, 4] has 12 along dim 0; its segments sum to 14"),
            std::string::npos);
}

// A deferred weight's fill writes any range of its local (tensor-parallel) elements, in any
// pieces, exactly as the whole draw has them: shard_of of init_normal, with the rows from
// zero_rows_from on zeroed (the vocabulary's padding), for every split of the test above.
TEST(Init, AFillWritesAnyRangeAsTheWholeDrawHasIt) {
  struct Case {
    ShardKind shard;
    Shape full;
    std::vector<int64_t> segments;
    int64_t zero_rows_from;
  };
  const std::vector<Case> cases = {
      {ShardKind::replicated, {9, 5}, {}, -1},    {ShardKind::replicated, {9, 5}, {}, 7},
      {ShardKind::rows, {12, 7}, {}, 9},          {ShardKind::cols, {5, 12}, {}, 3},
      {ShardKind::rows, {24, 5}, {12, 4, 8}, -1}, {ShardKind::cols, {3, 24}, {12, 4, 8}, -1}};
  for (const Case& c : cases)
    for (DType dtype : {DType::f32, DType::bf16})
      for (int size : {1, 2, 4}) {
        if (c.shard == ShardKind::replicated && size > 1) continue;
        ParamMeta meta;
        meta.shard = c.shard;
        meta.segments = c.segments;
        InitSpec spec{param_key(3, "lm_head.weight"), 0.02, dtype};
        Tensor whole = init_normal(c.full, spec);
        if (c.zero_rows_from >= 0)
          ops::zero_(ops::narrow(whole, 0, c.zero_rows_from, c.full[0] - c.zero_rows_from));
        spec.zero_rows_from = c.zero_rows_from;
        for (int r = 0; r < size; ++r) {
          const std::vector<float> want =
              to_vector<float>(ops::cast(shard_of(whole, meta, r, size, "w"), DType::f32));
          const ParamFill fill = normal_fill(c.full, spec, meta, r, size, "w");
          // Pieces of 1, 2, 3, ... elements, so they start and end inside rows and parts.
          const int64_t n = int64_t(want.size());
          Tensor got = empty(Shape{n}, dtype);
          for (int64_t at = 0, len = 1; at < n; at += len, ++len)
            fill(at, ops::narrow(got, 0, at, std::min(len, n - at)));
          EXPECT_EQ(to_vector<float>(ops::cast(got, DType::f32)), want)
              << c.full << " rank " << r << " of " << size << " " << dtype_name(dtype);
        }
      }
  const ParamFill fill = normal_fill(Shape{4, 3}, InitSpec{1}, ParamMeta{}, 0, 1, "w");
  EXPECT_NE(tessera::testing::error_of([&] {
              fill(10, empty(Shape{3}));
            }).find("'w': elements [10, 13) are outside its 12 (local shape [4, 3])"),
            std::string::npos);
  EXPECT_NE(tessera::testing::error_of([&] {
              fill(0, empty(Shape{3}, DType::bf16));
            }).find("fills a contiguous 1-D CPU f32 tensor"),
            std::string::npos);
}

TEST(Dropout, TrainingDropsAndScalesEvalIsIdentity) {
  auto state = std::make_shared<DropoutState>();
  state->seed = 99;
  Dropout drop(0.25, state, 3, kSiteMlp);
  Tensor x = ones(Shape{64, 1000});
  std::vector<float> y = to_vector<float>(drop.forward(x));
  int64_t zeros_seen = 0;
  for (float v : y) {
    if (v == 0.0f)
      ++zeros_seen;
    else
      EXPECT_FLOAT_EQ(v, 1.0f / 0.75f);
  }
  // 64000 Bernoulli(0.25) draws: std sqrt(64000 * 0.25 * 0.75) ~ 110; 5 sigma is 550.
  EXPECT_NEAR(double(zeros_seen), 16000.0, 550.0);
  drop.eval();
  EXPECT_TRUE(drop.forward(x).is_same(x));
}

TEST(Dropout, MaskDependsOnSeedStepLayerAndSiteOnly) {
  auto state = std::make_shared<DropoutState>();
  state->seed = 5;
  state->step = 10;
  Tensor x = ones(Shape{4, 257});
  auto mask = [&](int64_t layer, int64_t site) {
    return to_vector<float>(Dropout(0.5, state, layer, site).forward(x));
  };
  const std::vector<float> base = mask(1, kSiteAttention);
  EXPECT_EQ(mask(1, kSiteAttention), base);  // another module with the same key
  const int saved = num_threads();
  set_num_threads(1);
  EXPECT_EQ(mask(1, kSiteAttention), base);  // any thread count
  set_num_threads(saved);
  EXPECT_NE(mask(2, kSiteAttention), base);
  EXPECT_NE(mask(1, kSiteMlp), base);
  state->step = 11;
  EXPECT_NE(mask(1, kSiteAttention), base);
  state->step = 10;
  state->seed = 6;
  EXPECT_NE(mask(1, kSiteAttention), base);
  EXPECT_THROW(Dropout(1.0, state, 0, 0), Error);
  EXPECT_THROW(Dropout(0.1, nullptr, 0, 0), Error);
}

TEST(ModuleList, NamesChildrenByIndex) {
  ModuleList list;
  list.append(std::make_shared<Linear>(2, 2, false, InitSpec{}));
  list.append(std::make_shared<Linear>(2, 3, true, InitSpec{}));
  EXPECT_EQ(list.size(), 2);
  EXPECT_EQ(names_of(list.named_parameters()),
            (std::vector<std::string>{"0.weight", "1.weight", "1.bias"}));
}

}  // namespace
}  // namespace tessera::nn
