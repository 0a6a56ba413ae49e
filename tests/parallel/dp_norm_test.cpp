// The global gradient norm across groups, counting every element once:
//  - a tied parameter under dp x pp: the first and last pipeline stage each hold a copy of the
//    embedding; after the data-parallel reduction the copies' gradients are summed over the
//    embedding group, the norm counts them once, and both copies stay bit-identical;
//  - tensor parallelism: replicated parameters count once, sharded ones on every rank.
// Gradients are chosen exactly representable, so the expected values are exact.

#include <gtest/gtest.h>

#include <cmath>

#include "parallel/rank_test.h"
#include "tessera/parallel/data/data_parallel.h"
#include "tessera/parallel/mesh.h"
#include "tessera/tessera.h"

namespace tessera::parallel {
namespace {

Tensor leaf(Shape shape, double value) {
  Tensor t = full(shape, value);
  t.set_requires_grad(true);
  return t;
}

void tied_embedding(int stage) {
  auto world = testing::test_world();
  DeviceMesh mesh(world, {/*dp=*/2, /*pp=*/2, /*tp=*/1});
  ASSERT_NE(mesh.embedding(), nullptr);
  const int d = mesh.dp_rank(), p = mesh.pp_rank();
  // Stage 0 holds wte and a; stage 1 holds its copy of wte and b.
  Tensor wte = leaf({6, 4}, 0.5), other = leaf({p == 0 ? 10 : 7}, 0.25);
  nn::StateDict params = {{"wte.weight", wte}, {p == 0 ? "a" : "b", other}};
  DataParallelConfig c;
  c.zero_stage = stage;
  c.tied = {"wte.weight"};
  c.tied_group = mesh.embedding();
  c.norm_groups = {&mesh.pp()};
  c.param_meta = [p](const std::string& name) {
    nn::ParamMeta m;
    m.tied_copy = p == 1 && name == "wte.weight";
    return m;
  };
  c.adamw.weight_decay = 0.0;
  c.units = {{"embedding", {"wte.weight"}}, {"rest", {p == 0 ? "a" : "b"}}};
  DataParallel ddp(params, mesh.dp(), c);
  if (stage == 3) ddp.gather_parameters();  // this test reads the parameters directly

  // d(loss)/d(wte) = 1 + d + 10 p: the dp average is 1.5 + 10 p, the tied sum 1.5 + 11.5 = 13.
  // d(loss)/d(other) = 2 + d + p: the dp average is 2.5 + p.
  Tensor loss = add(sum(mul(wte, 1.0 + d + 10.0 * p)), sum(mul(other, 2.0 + d + p)));
  ddp.backward(loss);
  for (size_t b = 0; b < ddp.layout().buckets().size(); ++b) {
    const auto& bucket = ddp.layout().buckets()[b];
    std::vector<float> g = to_vector<float>(ddp.reducer().shard_grad(int(b)));
    const int64_t s = ddp.layout().shard_numel(int(b));
    for (int64_t i = 0; i < s; ++i) {
      const int64_t at = d * s + i;  // position in the bucket
      const float want = at >= bucket.used ? 0.0f : bucket.tied ? 13.0f : 2.5f + float(p);
      ASSERT_EQ(g[size_t(i)], want) << "bucket " << b << " element " << at;
    }
  }
  // Counted once: wte (24 elements of 13) on stage 0, a (10 of 2.5), b (7 of 3.5).
  const double want = std::sqrt(24 * 169.0 + 10 * 6.25 + 7 * 12.25);
  GradNorm norm = ddp.grad_norm();
  EXPECT_TRUE(norm.finite);
  EXPECT_NEAR(norm.norm, want, want * 1e-7);  // f32 partial sums of exact squares

  ddp.step();
  if (stage == 3) {
    ddp.release_parameters();
    ddp.gather_parameters();
  }
  // Both copies took the same update: gathered over the embedding group, they agree exactly.
  Tensor both = empty({2 * wte.numel()});
  mesh.embedding()->all_gather(ops::contiguous(ops::reshape(wte, {wte.numel()})), both);
  std::vector<float> v = to_vector<float>(both);
  EXPECT_EQ(std::vector<float>(v.begin(), v.begin() + 24),
            std::vector<float>(v.begin() + 24, v.end()));
  EXPECT_NE(v[0], 0.5f);  // it did move
  ddp.release_parameters();
}

RANK_TEST(DataParallelTiedN4, TiedCopiesAreSummedCountedOnceAndStayEqual) {
  for (int stage = 0; stage <= 3; ++stage) {
    SCOPED_TRACE("zero" + std::to_string(stage));
    tied_embedding(stage);
  }
}

// dp 2 x tp 2: a replicated norm weight (the same gradient on both tp ranks) and a row-sharded
// weight (each tp rank its own half). Both DataParallel's norm and the stand-alone one count
// the replicated weight once.
RANK_TEST(GlobalNormN4, ReplicatedParametersCountOnceShardedOnEveryTensorParallelRank) {
  auto world = testing::test_world();
  DeviceMesh mesh(world, {/*dp=*/2, /*pp=*/1, /*tp=*/2});
  const int d = mesh.dp_rank(), t = mesh.tp_rank();
  Tensor ln = leaf({8}, 1.0), w = leaf({4, 8}, 1.0);
  nn::StateDict params = {{"ln.weight", ln}, {"w", w}};
  auto meta = [](const std::string& name) {
    nn::ParamMeta m;
    m.shard = name == "w" ? nn::ShardKind::rows : nn::ShardKind::replicated;
    return m;
  };
  // Gradients: ln 3 + d everywhere (dp average 3.5, the same on both tp ranks);
  // w 1 + d + 2t (dp average 1.5 + 2t: 1.5 on tp rank 0's rows, 3.5 on tp rank 1's).
  const double want = std::sqrt(8 * 12.25 + 32 * 2.25 + 32 * 12.25);
  for (int stage = 0; stage <= 2; ++stage) {
    Tensor ln_s = leaf({8}, 1.0), w_s = leaf({4, 8}, 1.0);
    DataParallelConfig c;
    c.zero_stage = stage;
    c.param_meta = meta;
    c.tp = &mesh.tp();
    DataParallel ddp({{"ln.weight", ln_s}, {"w", w_s}}, mesh.dp(), c);
    ddp.backward(add(sum(mul(ln_s, 3.0 + d)), sum(mul(w_s, 1.0 + d + 2.0 * t))));
    EXPECT_NEAR(ddp.grad_norm().norm, want, want * 1e-7) << "zero" << stage;  // f32 sums
  }
  // Without DataParallel: each rank's own (already averaged) gradients, summed over tp.
  add(sum(mul(ln, 3.5)), sum(mul(w, 1.5 + 2.0 * t))).backward();
  GradNorm n = global_grad_norm(params, meta, &mesh.tp(), {});
  EXPECT_NEAR(n.norm, want, want * 1e-7);
  EXPECT_TRUE(n.finite);
}

}  // namespace
}  // namespace tessera::parallel
