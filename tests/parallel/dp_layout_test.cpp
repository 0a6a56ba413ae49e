// Flat layout arithmetic, parameter flattening, and DataParallel on a group of one (N1 suites:
// they run on one rank and need no peers).

#include <gtest/gtest.h>

#include <map>

#include "nn/tiny_models.h"
#include "parallel/dp_test_util.h"
#include "parallel/rank_test.h"
#include "support/error_of.h"
#include "tessera/parallel/comm/local_communicator.h"

namespace tessera::parallel {
namespace {

using testing::RunSpec;
using testing::TestModel;

nn::StateDict named(std::initializer_list<std::pair<std::string, Shape>> shapes) {
  nn::StateDict out;
  for (const auto& [name, shape] : shapes) out.emplace_back(name, zeros(shape));
  return out;
}

// Every element of every parameter lies in exactly one rank's shard, and shards never cover
// padding twice or miss a parameter element.
void expect_shards_partition(const FlatLayout& layout) {
  std::map<int, std::vector<int>> hits;
  for (size_t p = 0; p < layout.params().size(); ++p)
    hits[int(p)].assign(size_t(layout.params()[p].tensor.numel()), 0);
  for (size_t b = 0; b < layout.buckets().size(); ++b) {
    const auto& k = layout.buckets()[b];
    EXPECT_EQ(k.numel % (layout.dp_size() * FlatLayout::kShardAlign), 0);
    EXPECT_GE(k.numel, k.used);
    for (int r = 0; r < layout.dp_size(); ++r)
      for (const Segment& s : layout.shard_segments(int(b), r)) {
        EXPECT_EQ(layout.params()[size_t(s.param)].bucket, int(b));
        for (int64_t i = 0; i < s.length; ++i) ++hits[s.param][size_t(s.param_offset + i)];
      }
  }
  for (const auto& [p, h] : hits)
    for (int v : h) ASSERT_EQ(v, 1) << layout.params()[size_t(p)].name;
}

RANK_TEST(FlatLayoutN1, BucketsFollowTheBackwardOrderAndAlignToParameters) {
  // 40 + 16 + 64 + 8 floats; 200-byte buckets close after the first parameter that fills one.
  nn::StateDict params = named({{"a", {5, 8}}, {"b", {16}}, {"c", {8, 8}}, {"d", {8}}});
  LayoutOptions o;
  o.dp_size = 3;
  o.bucket_bytes = 200;
  FlatLayout layout(params, o);
  ASSERT_EQ(layout.buckets().size(), 2u);
  // Built from the last parameter: d (32 B) + c (256 B) close bucket 0; b + a form bucket 1.
  EXPECT_EQ(layout.buckets()[0].params, (std::vector<int>{2, 3}));
  EXPECT_EQ(layout.buckets()[1].params, (std::vector<int>{0, 1}));
  EXPECT_EQ(layout.params()[3].offset, 64);  // d after c inside bucket 0
  EXPECT_EQ(layout.buckets()[0].used, 72);
  EXPECT_EQ(layout.buckets()[0].numel, 96);  // next multiple of 3 * 16
  EXPECT_EQ(layout.buckets()[1].flat_offset, 96);
  EXPECT_EQ(layout.buckets()[1].shard_offset, 32);
  EXPECT_EQ(layout.spaces()[0].shard_numel * 3, layout.spaces()[0].numel);
  expect_shards_partition(layout);
}

RANK_TEST(FlatLayoutN1, ShardSegmentsCutThroughParameters) {
  LayoutOptions o;
  o.dp_size = 4;
  FlatLayout layout(named({{"w", {10, 3}}, {"b", {10}}}), o);
  ASSERT_EQ(layout.buckets().size(), 1u);
  EXPECT_EQ(layout.buckets()[0].numel, 64);
  // Rank 1 owns [16, 32): the end of w (16..29) and the start of b (0..1).
  std::vector<Segment> s = layout.shard_segments(0, 1);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].param, 0);
  EXPECT_EQ(s[0].param_offset, 16);
  EXPECT_EQ(s[0].length, 14);
  EXPECT_EQ(s[1].param, 1);
  EXPECT_EQ(s[1].param_offset, 0);
  EXPECT_EQ(s[1].length, 2);
  EXPECT_TRUE(layout.shard_segments(0, 3).empty());  // all padding
  expect_shards_partition(layout);
}

RANK_TEST(FlatLayoutN1, UnitsBecomeBucketsAndSharedParametersAreGatheredByEachReader) {
  testing::UnitStack model(11, 8, 2);
  nn::StateDict params = model.named_parameters();
  std::vector<UnitSpec> units = gpt_units(params);
  ASSERT_EQ(units.size(), 4u);
  EXPECT_EQ(units[0].name, "embedding");
  EXPECT_EQ(units[3].name, "head");
  EXPECT_EQ(units[3].params.back(), "wte.weight");  // the tied head reads the embedding
  LayoutOptions o;
  o.dp_size = 2;
  o.units = units;
  FlatLayout layout(params, o);
  ASSERT_EQ(layout.buckets().size(), 4u);
  EXPECT_EQ(layout.buckets()[0].unit, "head");  // backward order
  EXPECT_EQ(layout.buckets()[3].unit, "embedding");
  const auto& head = layout.units()[size_t(layout.find_unit("head"))];
  EXPECT_EQ(head.buckets, (std::vector<int>{0, 3}));
  EXPECT_EQ(layout.units()[size_t(layout.find_unit("h.1"))].buckets, (std::vector<int>{1}));
  expect_shards_partition(layout);
}

RANK_TEST(FlatLayoutN1, TiedParametersGetABucketOfTheirOwn) {
  LayoutOptions o;
  o.dp_size = 2;
  o.tied = {"wte.weight"};
  FlatLayout layout(named({{"wte.weight", {6, 4}}, {"h.0.w", {4, 4}}, {"ln_f.weight", {4}}}), o);
  ASSERT_EQ(layout.buckets().size(), 2u);
  EXPECT_TRUE(layout.buckets()[0].tied);
  EXPECT_EQ(layout.buckets()[0].params, (std::vector<int>{0}));
  EXPECT_EQ(layout.buckets()[1].params, (std::vector<int>{1, 2}));
}

RANK_TEST(FlatLayoutN1, GptUnitsFollowTheModelsNames) {
  nn::GPT gpt(nn::testing::tiny_llama(2));  // untied head: lm_head.weight is its own
  std::vector<UnitSpec> units = gpt_units(gpt.named_parameters());
  ASSERT_EQ(units.size(), 4u);
  EXPECT_EQ(units[1].name, "h.0");
  EXPECT_EQ(units[3].params, (std::vector<std::string>{"ln_f.weight", "lm_head.weight"}));
  EXPECT_THROW(gpt_units(named({{"mystery.weight", {2}}})), Error);
}

RANK_TEST(FlatLayoutN1, BadInputIsAnErrorNamingTheParameter) {
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  nn::StateDict params = named({{"a", {4}}, {"b", {4}}});
  LayoutOptions o;
  o.units = {{"u", {"a"}}};
  EXPECT_NE(message([&] { FlatLayout(params, o); }).find("'b' is in no unit"), std::string::npos);
  o.units = {{"u", {"a", "b", "zzz"}}};
  EXPECT_NE(message([&] { FlatLayout(params, o); }).find("'zzz'"), std::string::npos);
  nn::StateDict twice = {{"a", params[0].second}, {"a2", params[0].second}};
  EXPECT_NE(message([&] { FlatLayout(twice, {}); }).find("appears twice"), std::string::npos);
  nn::StateDict ints = {{"ids", zeros(Shape{3}, DType::i64)}};
  EXPECT_NE(message([&] { FlatLayout(ints, {}); }).find("'ids'"), std::string::npos);
  LayoutOptions bad;
  bad.dp_size = 0;
  EXPECT_THROW(FlatLayout(params, bad), Error);
}

RANK_TEST(FlatParamsN1, ParametersBecomeViewsOfOneBufferAndKeepTheirValues) {
  nn::GPT gpt(nn::testing::tiny_gpt2(2));
  nn::StateDict before;
  for (const auto& [name, p] : gpt.named_parameters()) before.emplace_back(name, ops::clone(p));
  LayoutOptions o;
  o.dp_size = 2;
  o.bucket_bytes = 4096;
  FlatLayout layout(gpt.named_parameters(), o);
  FlatParams flat(layout, 1, /*sharded=*/false);
  const auto storage = gpt.named_parameters().front().second.storage();
  for (const auto& [name, p] : gpt.named_parameters()) {
    EXPECT_EQ(p.storage(), storage) << name;
    EXPECT_EQ(to_vector<float>(p), to_vector<float>(nn::find_tensor(before, name))) << name;
  }
  // The module writes through the same handles into the flat buffer.
  gpt.load_state_dict({{"ln_f.weight", full(Shape{16}, 3.0)}}, /*strict=*/false);
  for (const auto& p : layout.params()) {
    if (p.name == "ln_f.weight") {
      EXPECT_EQ(to_vector<float>(ops::narrow(flat.bucket(p.bucket), 0, p.offset, 16)),
                std::vector<float>(16, 3.0f));
    }
  }
}

RANK_TEST(FlatParamsN1, ShardedParametersLiveOnlyWhileGathered) {
  testing::UnitStack model(11, 8, 1);
  LayoutOptions o;
  o.units = gpt_units(model.named_parameters());
  FlatLayout layout(model.named_parameters(), o);
  std::vector<float> wte = to_vector<float>(model.named_parameters()[0].second);
  FlatParams flat(layout, 0, /*sharded=*/true);
  const int b = layout.params()[0].bucket;
  EXPECT_FALSE(flat.gathered(b));
  EXPECT_THROW(to_vector<float>(model.named_parameters()[0].second), Error);  // freed
  LocalCommunicator one;
  flat.gather_async(b, one)->wait();
  EXPECT_EQ(to_vector<float>(model.named_parameters()[0].second), wte);
  flat.release(b);
  EXPECT_FALSE(flat.gathered(b));
}

// A model built with deferred weights holds none of them, and a sharded FlatParams fills this
// rank's shards straight from their fills: the shards are the drawn model's to the bit, and
// the rank never held more than its shards beside the few tensors built as usual (norm gains,
// biases). Built held instead (defer_parameters false), the whole model sits in memory first
// and the peak bound fails.
RANK_TEST(FlatParamsN1, DeferredWeightsFillOnlyThisRanksShard) {
  const nn::GPTConfig config = nn::testing::tiny_llama();
  const nn::GPT drawn(config);
  LayoutOptions o;
  o.dp_size = 4;
  o.units = gpt_units(drawn.named_parameters());
  const FlatLayout drawn_layout(drawn.named_parameters(), o);
  const int rank = 2;
  // What a model holds beside its drawn (2-D) weights: norm gains, biases, buffers.
  int64_t small = 0;
  for (const auto& [name, t] : drawn.state_dict()) {
    const Tensor p = nn::find_tensor(drawn.named_parameters(), name);
    if (!p.defined() || p.dim() != 2) small += int64_t(t.nbytes());
  }
  const FlatParams want(drawn_layout, rank, /*sharded=*/true);

  Allocator& host = allocator_for(Device::cpu());
  const int64_t before = host.stats().live_bytes;
  host.reset_peak();
  nn::ModelParallel mp;
  mp.defer_parameters = true;
  const nn::GPT gpt(config, DType::f32, mp);
  int64_t deferred = 0;
  for (const auto& [name, p] : gpt.named_parameters())
    if (p.storage()->never_allocated()) deferred += int64_t(p.nbytes());
  EXPECT_EQ(host.stats().live_bytes - before, small);
  const FlatLayout layout(gpt.named_parameters(), o);
  const FlatParams got(layout, rank, /*sharded=*/true, nullptr,
                       [&](const std::string& name) { return gpt.param_fill(name); });
  int64_t shards = 0;
  for (size_t b = 0; b < layout.buckets().size(); ++b) {
    shards += int64_t(got.shard(int(b)).nbytes());
    EXPECT_EQ(to_vector<float>(got.shard(int(b))), to_vector<float>(want.shard(int(b))))
        << "bucket " << b;
  }
  const int64_t peak = host.stats().peak_bytes - before;
  EXPECT_GT(deferred, 4 * small);  // the drawn weights are nearly all of it
  // Deferred weights and nothing to fill them with: an error naming the first.
  const nn::GPT unfilled(config, DType::f32, mp);
  const FlatLayout unfilled_layout(unfilled.named_parameters(), o);
  EXPECT_NE(tessera::testing::error_of([&] { FlatParams(unfilled_layout, rank, true); })
                .find("parameter 'wte.weight' f32[24, 16] on cpu is deferred (no memory yet) and "
                      "nothing says how to fill it (DataParallelConfig::param_fill)"),
            std::string::npos);
  // The shards, the small tensors, and the layout's few small vectors (1 KiB covers them).
  EXPECT_LE(peak, shards + small + 1024) << "deferred weights " << deferred;
}

// On a group of one, DataParallel at every stage is the single-process optimizer, bit for bit:
// the flat buffers, shards and segment-wise norm change no number (the norm's pieces are the
// whole gradients in parameter order, exactly nn::global_grad_norm's list).
RANK_TEST(DataParallelN1, GroupOfOneMatchesTheSingleProcessOptimizerExactly) {
  nn::testing::OneThread one_thread;
  RunSpec spec;
  spec.steps = 3;
  spec.vocab = 29;
  auto config = nn::testing::tiny_gpt2(2);
  config.vocab_size = spec.vocab;
  testing::RunResult ref = testing::run_single(testing::tiny_gpt(config), spec);
  // The clip is active in some step, so its factor is part of what must agree.
  EXPECT_GT(*std::max_element(ref.norms.begin(), ref.norms.end()), spec.max_grad_norm);
  LocalCommunicator one;
  for (int stage = 0; stage <= 3; ++stage) {
    TestModel model = stage == 3 ? testing::unit_stack() : testing::tiny_gpt(config);
    testing::RunResult want = stage == 3 ? testing::run_single(testing::unit_stack(), spec) : ref;
    DataParallelConfig c;
    c.zero_stage = stage;
    if (stage == 3) c.units = gpt_units(model.module->named_parameters());
    testing::RunResult got = testing::run_data_parallel(model, one, c, spec);
    EXPECT_EQ(got.losses, want.losses) << "stage " << stage;
    EXPECT_EQ(got.norms, want.norms) << "stage " << stage;
    for (size_t i = 0; i < got.weights.size(); ++i)
      ASSERT_EQ(got.weights[i].second, want.weights[i].second)
          << "stage " << stage << " " << got.weights[i].first;
  }
}

RANK_TEST(DataParallelN1, NonFiniteGradientSkipsTheStepAndSaysSo) {
  testing::UnitStack model(11, 8, 1);
  LocalCommunicator one;
  DataParallelConfig c;
  c.zero_stage = 1;
  DataParallel ddp(model.named_parameters(), one, c);
  std::vector<float> before = to_vector<float>(model.named_parameters()[0].second);
  testing::Batch b = testing::global_batch(0, 2, 4, 11);
  ddp.backward(mul(model.loss(b.inputs, b.targets), std::numeric_limits<double>::infinity()));
  StepResult r = ddp.step();
  EXPECT_FALSE(r.finite);
  EXPECT_FALSE(std::isfinite(r.grad_norm));
  EXPECT_EQ(to_vector<float>(model.named_parameters()[0].second), before);
  EXPECT_EQ(ddp.optimizer().step_count(), 0);
}

RANK_TEST(DataParallelN1, ResettingGradientsBehindItsBackIsAClearError) {
  testing::UnitStack model(11, 8, 1);
  LocalCommunicator one;
  DataParallel ddp(model.named_parameters(), one, {});
  model.zero_grad();  // drops the flat views
  testing::Batch b = testing::global_batch(0, 2, 4, 11);
  try {
    ddp.backward(model.loss(b.inputs, b.targets));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DataParallel::zero_grad"), std::string::npos) << e.what();
  }
}

RANK_TEST(DataParallelN1, ZeroThreeKeepsWeightsLoadedWhileGathered) {
  testing::UnitStack model(11, 8, 1);
  LocalCommunicator one;
  DataParallelConfig c;
  c.zero_stage = 3;
  c.units = gpt_units(model.named_parameters());
  DataParallel ddp(model.named_parameters(), one, c);
  ddp.gather_parameters();
  model.load_state_dict({{"h.0.fc.weight", full(Shape{8, 8}, 0.25)}}, /*strict=*/false);
  ddp.release_parameters();
  EXPECT_THROW(to_vector<float>(nn::find_tensor(model.named_parameters(), "h.0.fc.weight")), Error);
  ddp.gather_parameters();
  EXPECT_EQ(to_vector<float>(nn::find_tensor(model.named_parameters(), "h.0.fc.weight")),
            std::vector<float>(64, 0.25f));
  ddp.release_parameters();
}

RANK_TEST(DataParallelN1, ZeroThreeNeedsUnitsAndKnowsThem) {
  testing::UnitStack model(11, 8, 1);
  LocalCommunicator one;
  DataParallelConfig c;
  c.zero_stage = 3;
  EXPECT_THROW(DataParallel(model.named_parameters(), one, c), Error);
  c.units = gpt_units(model.named_parameters());
  DataParallel ddp(model.named_parameters(), one, c);
  try {
    ddp.unit_hooks()->before("h.7", zeros(Shape{1}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("embedding, h.0, head"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tessera::parallel
