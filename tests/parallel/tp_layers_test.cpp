// Each tensor-parallel layer against its unsharded twin built from the same full weights: the
// output (this rank's part of it) and every gradient shard (shard r of the twin's full
// gradient, cut with nn::shard_of), with and without sequence parallelism.
//
// Tolerances (Tolerance in tp_test_util.h): a row-parallel layer sums tp partial dot products
// where the twin sums one, and the vocab-parallel loss sums exponentials per rank and then
// across ranks, so results differ by the rounding of reordered sums. That this is the only
// difference is proven in f64, where every output and gradient of attention, MLP and block
// (GQA, RoPE, sequence parallelism, dropout) matches to 1e-12 relative. In f32 entries that are
// sums with cancellation (the GQA input gradient: -0.117623 vs -0.117619 at tp = 4) differ by
// up to ~n u of the tensor's largest entry, not of their own size, so the f32 bound is relative
// to the tensor's scale. The key-bias gradient is zero in exact arithmetic and is asserted to be
// rounding noise in both models (expect_key_bias_grad_zero) instead of compared. The embedding
// does the same lookups and is asserted bit-identical (see VocabEmbedding).

#include <functional>
#include <string>
#include <vector>

#include "parallel/rank_test.h"
#include "tessera/parallel/tp/detail/regions.h"
#include "tessera/parallel/tp/detail/vocab_cross_entropy.h"
#include "tests/parallel/tp_test_util.h"

namespace tessera::parallel {
namespace {

using nn::LayerContext;
using nn::ParamMeta;
using nn::ShardKind;
using testing::expect_close;
using testing::expect_equal;
using testing::expect_key_bias_grad_zero;
using testing::kF32;
using testing::leaf;
using testing::make_tp;
using testing::random_tensor;
using testing::randomize;
using testing::split_qkv;
using testing::Tolerance;
using testing::tolerance_for;

int world_size() {
  return testing::test_world()->size();
}

// sum(y * gy): a scalar whose gradient with respect to y is gy.
Tensor project(const Tensor& y, const Tensor& gy) {
  return sum(y * gy);
}

ParamMeta split_meta(ShardKind shard) {
  ParamMeta m;
  m.shard = shard;
  return m;
}

// Where the attention's key-bias gradient sits: the c_attn bias of a shard holds its
// n_head / t query, then n_kv_head / t key, then n_kv_head / t value heads.
struct Qkv {
  int64_t n_head = 0, n_kv_head = 0, head_dim = 0, batch = 0, seq = 0;
};

// Compares every parameter gradient of `part` with shard r of the twin's. With qkv set, the
// c_attn bias gradient's key part is asserted to be noise in both and the rest compared.
void expect_grad_shards(const nn::Module& part, const nn::Module& full, int r, int t, Tolerance tol,
                        const std::string& what, const Qkv* qkv = nullptr) {
  const nn::StateDict full_params = full.named_parameters();
  for (const auto& [name, p] : part.named_parameters()) {
    Tensor want = nn::find_tensor(full_params, name).grad();
    ASSERT_TRUE(want.defined() && p.grad().defined()) << what << " " << name;
    want = nn::shard_of(want, part.param_meta(name), r, t, name);
    const std::string label = what + " grad " + name;
    if (qkv == nullptr || !name.ends_with("c_attn.bias")) {
      expect_close(p.grad(), want, tol, label);
      continue;
    }
    const auto got_parts = split_qkv(p.grad(), qkv->n_head / t, qkv->n_kv_head / t, qkv->head_dim);
    const auto want_parts = split_qkv(want, qkv->n_head / t, qkv->n_kv_head / t, qkv->head_dim);
    expect_key_bias_grad_zero(got_parts.k, got_parts.q, qkv->batch, qkv->seq, label + " (tp) b_k");
    expect_key_bias_grad_zero(want_parts.k, want_parts.q, qkv->batch, qkv->seq,
                              label + " (twin) b_k");
    expect_close(got_parts.q, want_parts.q, tol, label + " b_q");
    expect_close(got_parts.v, want_parts.v, tol, label + " b_v");
  }
}

RANK_TEST(TensorParallelLayersN2, ColumnParallelLinear) {
  const int t = world_size();
  auto tpo = make_tp(t, false);
  const int r = tpo->rank();
  const int64_t in = 6, out = 4 * t;
  nn::Linear full(in, out, true, nn::InitSpec{11, 0.02});
  randomize(full, 1);
  nn::Linear part(in, out, true, nn::InitSpec{11, 0.02},
                  nn::ParallelSplit{tpo, split_meta(ShardKind::rows)});
  EXPECT_EQ(part.weight().shape(), Shape({out / t, in}));
  EXPECT_EQ(part.param_meta("bias").shard, ShardKind::rows);
  tp::load_full_state_dict(part, full.state_dict(), r, t);

  Tensor x = leaf(random_tensor({2, 3, in}, 2)), gy = random_tensor({2, 3, out}, 3);
  Tensor y = full.forward(x);
  project(y, gy).backward();

  Tensor xp = leaf(x);
  Tensor yp = part.forward(tpo->copy_to_region(xp));
  expect_close(yp, ops::narrow(y, 2, r * out / t, out / t), kF32, "column output");
  project(yp, ops::narrow(gy, 2, r * out / t, out / t)).backward();
  // copy_to_region's backward sums the ranks' partial input gradients.
  expect_close(xp.grad(), x.grad(), kF32, "column input grad");
  expect_grad_shards(part, full, r, t, kF32, "column");
}

void row_parallel(bool sequence_parallel) {
  const int t = world_size();
  auto tpo = make_tp(t, sequence_parallel);
  const int r = tpo->rank();
  const int64_t in = 3 * t, out = 5, T = 2 * t, ts = T / t;
  nn::Linear full(in, out, true, nn::InitSpec{12, 0.02});
  randomize(full, 4);
  nn::Linear part(in, out, true, nn::InitSpec{12, 0.02},
                  nn::ParallelSplit{tpo, split_meta(ShardKind::cols)});
  EXPECT_EQ(part.weight().shape(), Shape({out, in / t}));
  EXPECT_EQ(part.param_meta("bias").shard, ShardKind::replicated);
  tp::load_full_state_dict(part, full.state_dict(), r, t);

  Tensor x = leaf(random_tensor({2, T, in}, 5)), gy = random_tensor({2, T, out}, 6);
  Tensor y = full.forward(x);
  project(y, gy).backward();

  Tensor xp = leaf(ops::narrow(x, 2, r * in / t, in / t));
  Tensor yp = part.forward(xp, sequence_parallel);
  Tensor want = sequence_parallel ? ops::narrow(y, 1, r * ts, ts) : y;
  expect_close(yp, want, kF32, "row output");
  project(yp, sequence_parallel ? ops::narrow(gy, 1, r * ts, ts) : gy).backward();
  expect_close(xp.grad(), ops::narrow(x.grad(), 2, r * in / t, in / t), kF32, "row input grad");
  // The bias is added once, after the reduction; under sequence parallelism its gradient is
  // summed over the ranks' sequence shards, so it is the full gradient on every rank.
  expect_grad_shards(part, full, r, t, kF32, "row");
}

RANK_TEST(TensorParallelLayersN2, RowParallelLinear) {
  row_parallel(false);
}
RANK_TEST(TensorParallelLayersN2, RowParallelLinearSequenceParallel) {
  row_parallel(true);
}

// A config whose heads, kv heads and MLP width split over t ranks: H = 2t, Hkv = t (grouped-
// query attention), C = 8t (head dim 4), dropout on.
nn::GPTConfig layer_config(int t, bool llama) {
  nn::GPTConfig c;
  c.vocab_size = 23;
  c.vocab_multiple = 8;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2 * t;
  c.n_kv_head = t;
  c.n_embd = 8 * t;
  c.dropout = 0.2;
  if (llama) {
    c.norm = nn::NormKind::rmsnorm;
    c.mlp = nn::MlpKind::swiglu;
    c.position = nn::PositionKind::rope;
    c.bias = false;
  }
  return c;
}

// forward(module, x, sequence_sharded) for the module kinds below.
template <class M>
using Forward = std::function<Tensor(const M&, const Tensor&, bool)>;

// Builds M twice from the same context, once with the tp group; loads the twin's random full
// weights into the shards; compares output, input gradient and every parameter gradient.
template <class M>
void check_module(const nn::GPTConfig& cfg, bool sequence_parallel, DType dtype,
                  const Forward<M>& forward, const std::string& what) {
  const int t = world_size();
  auto tpo = make_tp(t, sequence_parallel);
  const int r = tpo->rank();
  auto dropout = std::make_shared<nn::DropoutState>();
  dropout->seed = 99;
  dropout->step = 3;
  const LayerContext ctx{&cfg, 1, "h.1.", dtype, dropout, nullptr};
  LayerContext tp_ctx = ctx;
  tp_ctx.tp = tpo;
  M full(ctx), part(tp_ctx);
  randomize(full, 7);
  tp::load_full_state_dict(part, full.state_dict(), r, t);

  const int64_t B = 2, T = 2 * t, ts = T / t, C = cfg.n_embd;
  Tensor x = leaf(random_tensor({B, T, C}, 8, 1.0, dtype));
  Tensor gy = random_tensor({B, T, C}, 9, 1.0, dtype);
  Tensor y = forward(full, x, false);
  project(y, gy).backward();

  auto mine = [&](const Tensor& a) {
    return sequence_parallel ? ops::narrow(a, 1, r * ts, ts) : a;
  };
  const Tolerance tol = tolerance_for(dtype);
  Tensor xp = leaf(mine(x));
  Tensor yp = forward(part, xp, sequence_parallel);
  const std::string label = what + (dtype == DType::f64 ? " f64" : " f32");
  expect_close(yp, mine(y), tol, label + " output");
  project(yp, mine(gy)).backward();
  expect_close(xp.grad(), mine(x.grad()), tol, label + " input grad");
  // Every c_attn bias in these modules (attention's, or a block's attention's) has a key part.
  const Qkv qkv{cfg.n_head, cfg.n_kv_head, cfg.head_dim(), B, T};
  expect_grad_shards(part, full, r, t, tol, label, cfg.bias ? &qkv : nullptr);
}

void attention(bool llama, bool sequence_parallel, DType dtype) {
  const nn::GPTConfig cfg = layer_config(world_size(), llama);
  check_module<nn::CausalSelfAttention>(
      cfg, sequence_parallel, dtype,
      [](const nn::CausalSelfAttention& m, const Tensor& x, bool) { return m.forward(x); },
      llama ? "gqa rope attention" : "attention");
}

void mlp(bool llama, bool sequence_parallel, DType dtype) {
  const nn::GPTConfig cfg = layer_config(world_size(), llama);
  check_module<nn::MLP>(
      cfg, sequence_parallel, dtype,
      [](const nn::MLP& m, const Tensor& x, bool sharded) { return m.forward(x, sharded); },
      llama ? "swiglu mlp" : "gelu mlp");
}

void block(bool llama, bool sequence_parallel, DType dtype) {
  const nn::GPTConfig cfg = layer_config(world_size(), llama);
  check_module<nn::Block>(
      cfg, sequence_parallel, dtype,
      [](const nn::Block& m, const Tensor& x, bool) { return m.forward(x); },
      llama ? "llama block" : "gpt2 block");
}

// Each case in f64 first (the proof that the layer is exact up to the order of sums), then in
// f32, the dtype of training.
RANK_TEST(TensorParallelLayersN2, Attention) {
  for (DType dtype : {DType::f64, DType::f32}) {
    attention(false, false, dtype);
    attention(true, false, dtype);
  }
}
RANK_TEST(TensorParallelLayersN2, AttentionSequenceParallel) {
  for (DType dtype : {DType::f64, DType::f32}) {
    attention(false, true, dtype);
    attention(true, true, dtype);
  }
}
RANK_TEST(TensorParallelLayersN2, Mlp) {
  for (DType dtype : {DType::f64, DType::f32}) {
    mlp(false, false, dtype);
    mlp(true, false, dtype);
    mlp(true, true, dtype);
  }
}
RANK_TEST(TensorParallelLayersN2, BlockWithNormsAndDropout) {
  for (DType dtype : {DType::f64, DType::f32}) {
    block(false, false, dtype);
    block(false, true, dtype);
    block(true, true, dtype);
  }
}
RANK_TEST(TensorParallelLayersN4, AttentionMlpAndBlock) {
  for (DType dtype : {DType::f64, DType::f32}) {
    attention(true, false, dtype);
    attention(false, true, dtype);
    mlp(false, true, dtype);
    mlp(true, false, dtype);
    block(true, true, dtype);
  }
}

RANK_TEST(TensorParallelLayersN2, AttentionHeadsMustSplit) {
  nn::GPTConfig cfg = layer_config(world_size(), true);
  cfg.n_head = 3 * world_size() + 1;
  cfg.n_kv_head = 1;
  cfg.n_embd = 4 * cfg.n_head;
  const LayerContext ctx{&cfg,
                         0,
                         "h.0.",
                         DType::f32,
                         std::make_shared<nn::DropoutState>(),
                         make_tp(world_size(), false)};
  try {
    nn::CausalSelfAttention attn(ctx);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_head (" + std::to_string(cfg.n_head) + ")"),
              std::string::npos)
        << e.what();
  }
}

void vocab_embedding() {
  const int t = world_size();
  auto tpo = make_tp(t, false);
  const int r = tpo->rank();
  const int64_t rows = 8 * t, real = rows - 3, C = 6;
  const nn::InitSpec init{21, 0.02};
  nn::Embedding full(rows, C, init, real);
  nn::Embedding part(rows, C, init, real, nn::ParallelSplit{tpo, split_meta(ShardKind::rows)});
  EXPECT_EQ(part.weight().shape(), Shape({rows / t, C}));
  EXPECT_EQ(part.vocab_start(), r * rows / t);
  // Drawn from the same key, the shard is exactly the twin's rows (padding rows zero).
  expect_equal(part.weight(), ops::narrow(full.weight(), 0, r * rows / t, rows / t), "init");

  // Ids on every rank's rows, repeated, so the scatter-add accumulates.
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 14; ++i) ids.push_back((i * 5 + 3) % real);
  Tensor idx = from_vector<int64_t>(ids, {2, 7});
  Tensor gy = random_tensor({2, 7, C}, 22);
  Tensor y = full.forward(idx);
  project(y, gy).backward();
  Tensor yp = part.forward(idx);
  project(yp, gy).backward();
  // Exactly one rank contributes each row and the others add exact zeros, and each weight row
  // accumulates the same gradient rows in the same order: bit-identical.
  expect_equal(yp, y, "vocab embedding output");
  expect_equal(part.weight().grad(),
               nn::shard_of(full.weight().grad(), part.param_meta("weight"), r, t, "wte"),
               "vocab embedding grad");
  EXPECT_THROW(part.forward(from_vector<int64_t>({0, rows}, {2})), Error);
}

RANK_TEST(TensorParallelLayersN2, VocabEmbedding) {
  vocab_embedding();
}
RANK_TEST(TensorParallelLayersN4, VocabEmbedding) {
  vocab_embedding();
}

// Logits [2, 5, 4t] of which the first `classes` columns are real; some targets ignored.
void vocab_cross_entropy(int64_t classes, bool all_ignored, DType dtype) {
  const int t = world_size();
  auto tpo = make_tp(t, false);
  const int r = tpo->rank();
  const int64_t V = 4 * t, vl = V / t;
  Tensor logits = leaf(ops::cast(random_tensor({2, 5, V}, 31, 2.0), dtype));
  std::vector<int64_t> tv;
  for (int64_t i = 0; i < 10; ++i)
    tv.push_back(all_ignored || i % 4 == 3 ? -100 : (i * 7 + 2) % classes);
  Tensor targets = from_vector<int64_t>(tv, {2, 5});
  Tensor loss = cross_entropy(logits, targets, -100, classes);
  loss.backward();

  Tensor shard = leaf(ops::narrow(logits, 2, r * vl, vl));
  Tensor lp = tpo->vocab_parallel_cross_entropy(shard, targets, r * vl, classes, -100);
  ASSERT_EQ(lp.dim(), 0);
  // f64 logits keep f64 throughout: only the reordering's f64 rounding.
  const Tolerance tol = tolerance_for(dtype);
  const std::string what = "vocab ce classes=" + std::to_string(classes);
  expect_close(lp, loss, tol, what + " loss");
  lp.backward();
  expect_close(shard.grad(), ops::narrow(logits.grad(), 2, r * vl, vl), tol, what + " grad");
  if (all_ignored) {
    EXPECT_EQ(lp.item<float>(), 0.f);
  }
}

RANK_TEST(TensorParallelLayersN2, VocabParallelCrossEntropy) {
  const int64_t V = 4 * world_size();
  vocab_cross_entropy(V, false, DType::f32);
  // The last rank holds padding columns only partly real.
  vocab_cross_entropy(V - 3, false, DType::f32);
  vocab_cross_entropy(V - 3, false, DType::f64);
  vocab_cross_entropy(V - 3, true, DType::f32);
}

RANK_TEST(TensorParallelLayersN4, VocabParallelCrossEntropy) {
  // 16 columns, 9 real: rank 2 has one real class and rank 3 none.
  vocab_cross_entropy(9, false, DType::f32);
  vocab_cross_entropy(16, false, DType::f32);
}

RANK_TEST(TensorParallelLayersN2, VocabParallelCrossEntropyBadTarget) {
  auto tpo = make_tp(world_size(), false);
  Tensor logits = random_tensor({3, 4}, 1);
  try {
    tpo->vocab_parallel_cross_entropy(logits, from_vector<int64_t>({0, 9, 1}, {3}), 0, 7, -100);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target 9 at flat position 1"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      tpo->vocab_parallel_cross_entropy(logits, from_vector<int64_t>({0, 1}, {2}), 0, 7, -100),
      Error);
}

}  // namespace
}  // namespace tessera::parallel
