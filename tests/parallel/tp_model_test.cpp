// Whole GPT-2 and Llama-style (grouped-query) models under tensor parallelism, with and without
// sequence parallelism and with dropout on, against the single-process model: per-step losses,
// every gathered gradient, and the weights after several AdamW steps. Also the layout errors,
// and greedy generation.
//
// Tolerances. The tensor-parallel model reorders sums (row-parallel all-reduces, the vocab-
// parallel loss's per-rank partial sums), and nothing else: in f64 its loss and every gradient
// match one process to f64 rounding (F64LossAndGradientsMatchOneProcess, kF64). In f32:
//  - Loss and gradients: kF32 (1e-5 relative plus 1e-5 of the tensor's largest entry, see
//    tp_test_util.h); measured at most 3.2e-7 of the largest entry.
//  - The key-projection bias b_k has a zero gradient (softmax ignores a per-row shift), so its
//    computed gradient is rounding noise of either sign in both models; it is asserted to be
//    noise (expect_key_bias_grad_zero) rather than compared.
//  - Weights after AdamW: the update lr m/sqrt(v) divides each element's gradient by its own
//    magnitude, so a gradient difference that is tiny against the tensor's largest entry moves
//    an element with a small gradient by a sizeable part of lr (h.1.mlp.c_fc.weight:
//    -0.00138332 vs -0.00138308 after 3 steps at lr 1e-2), and moves b_k, whose gradient is
//    noise, by up to lr per step in either direction. AdamDrift bounds this per element from the
//    one-process gradients: a change d_k in the step-k gradient moves m/sqrt(v) by at most
//    2.01 sum_k d_k / sqrt(v) (m's weights are <= 1, and b_k g_k^2 <= v bounds the change of v),
//    capped at the 2.02 lr one step can move an element at all (|m/sqrt(v)| <= 1.004 in the
//    first three steps with betas 0.9, 0.999). d_k is the gradient tolerance kF32 (b_k: no
//    bound, so the cap). lr is 1e-3: the later steps' gradients are compared with kF32 although
//    the weights already differ by the drift, and at 1e-3 the drift's effect on the gradients
//    stays below kF32 (at 1e-2, weights of std 0.02 move by half their size per step and the
//    gradients of tp4 Llama differ by 1e-3 relative at step 2).
// The initial weights are drawn from the same keys and sliced, so they are asserted
// bit-identical.

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "parallel/rank_test.h"
#include "tests/parallel/tp_test_util.h"

namespace tessera::parallel {
namespace {

using testing::expect_close;
using testing::expect_equal;
using testing::expect_key_bias_grad_zero;
using testing::kF32;
using testing::kF64;
using testing::make_tp;
using testing::split_qkv;
using testing::Tolerance;

int world_size() {
  return testing::test_world()->size();
}

// GPT-2 style with 2t heads (so t divides them), a vocabulary that needs padding, dropout on.
nn::GPTConfig gpt2_config(int t) {
  nn::GPTConfig c;
  c.vocab_size = 29;
  c.vocab_multiple = 8;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2 * t;
  c.n_kv_head = 2 * t;
  c.n_embd = 8 * t;
  c.dropout = 0.1;
  c.init_seed = 5;
  return c;
}

// Llama style: RoPE, RMSNorm, SwiGLU, untied head, 2t query heads sharing t kv heads.
nn::GPTConfig llama_config(int t) {
  nn::GPTConfig c = gpt2_config(t);
  c.n_kv_head = t;
  c.norm = nn::NormKind::rmsnorm;
  c.mlp = nn::MlpKind::swiglu;
  c.position = nn::PositionKind::rope;
  c.tie_embeddings = false;
  c.bias = false;
  return c;
}

// Ids in [0, vocab) from a fixed sequence; every fifth target ignored.
Tensor batch(int64_t B, int64_t T, int64_t vocab, uint64_t seed, bool targets) {
  std::vector<int64_t> v(static_cast<size_t>(B * T));
  uint64_t x = seed * 2862933555777941757ull + 3037000493ull;
  for (size_t i = 0; i < v.size(); ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v[i] = targets && i % 5 == 4 ? -100 : int64_t((x >> 33) % uint64_t(vocab));
  }
  return from_vector<int64_t>(v, {B, T});
}

std::string name_of(const nn::GPTConfig& cfg, int t, bool sequence_parallel) {
  return std::string(cfg.mlp == nn::MlpKind::swiglu ? "llama" : "gpt2") + " tp" +
         std::to_string(t) + (sequence_parallel ? " sp" : "");
}

void expect_dicts_close(const nn::StateDict& got, const nn::StateDict& want, Tolerance tol,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].first, want[i].first) << what;
    expect_close(got[i].second, want[i].second, tol, what + " " + got[i].first);
  }
}

bool is_qkv_bias(const std::string& name) {
  return name.ends_with("attn.c_attn.bias");
}

// f32 gradients (see the file comment): the key-bias part is asserted to be noise in both
// models; everything else is compared with kF32.
void expect_grads_close(const nn::StateDict& got, const nn::StateDict& want,
                        const nn::GPTConfig& cfg, const Tensor& idx, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const std::string& name = got[i].first;
    ASSERT_EQ(name, want[i].first) << what;
    if (!is_qkv_bias(name)) {
      expect_close(got[i].second, want[i].second, kF32, what + " " + name);
      continue;
    }
    const auto g = split_qkv(got[i].second, cfg.n_head, cfg.n_kv_head, cfg.head_dim());
    const auto w = split_qkv(want[i].second, cfg.n_head, cfg.n_kv_head, cfg.head_dim());
    expect_key_bias_grad_zero(g.k, g.q, idx.size(0), idx.size(1), what + " (tp) b_k of " + name);
    expect_key_bias_grad_zero(w.k, w.q, idx.size(0), idx.size(1),
                              what + " (one process) b_k of " + name);
    expect_close(g.q, w.q, kF32, what + " b_q of " + name);
    expect_close(g.v, w.v, kF32, what + " b_v of " + name);
  }
}

// How far AdamW can carry the two models' weights apart, element by element, given that each
// step's gradients differ by at most the tolerance just asserted (see the file comment).
class AdamDrift {
 public:
  explicit AdamDrift(const nn::AdamWOptions& opt) : opt_(opt) {}

  // After step `t` (from 1) with the one-process gradients `grads`, named as the weights.
  void add_step(const nn::StateDict& grads, const nn::GPTConfig& cfg) {
    ++t_;
    for (const auto& [name, g] : grads) {
      const std::vector<double> gv = to_vector<double>(ops::cast(g, DType::f64));
      State& s = state_[name];
      if (s.v.empty()) s.v.assign(gv.size(), 0), s.err.assign(gv.size(), 0), s.bound = s.v;
      const double scale = kF32.scaled * testing::max_abs(g);
      const double bc2 = 1 - std::pow(opt_.beta2, double(t_));
      for (size_t i = 0; i < gv.size(); ++i) {
        s.err[i] +=
            is_key_bias(cfg, name, int64_t(i)) ? INFINITY : kF32.rtol * std::abs(gv[i]) + scale;
        s.v[i] = opt_.beta2 * s.v[i] + (1 - opt_.beta2) * gv[i] * gv[i];
        const double step = 2.01 * s.err[i] / (std::sqrt(s.v[i] / bc2) + opt_.eps);
        s.bound[i] += opt_.lr * std::min(step, 2.02);
      }
    }
  }

  // EXPECTs every weight within its bound plus 1e-6 relative (the f32 rounding of the updates).
  void expect_within(const nn::StateDict& got, const nn::StateDict& want,
                     const std::string& what) const {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t k = 0; k < got.size(); ++k) {
      const std::string& name = got[k].first;
      const std::vector<double> a = to_vector<double>(ops::cast(got[k].second, DType::f64));
      const std::vector<double> b = to_vector<double>(ops::cast(want[k].second, DType::f64));
      const std::vector<double>& bound = state_.at(name).bound;
      size_t worst = 0;
      double worst_ratio = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        const double ratio = std::abs(a[i] - b[i]) / (bound[i] + 1e-6 * std::abs(b[i]));
        if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
      }
      EXPECT_LE(worst_ratio, 1.0) << what << " " << name << ": element " << worst << " is "
                                  << a[worst] << " vs " << b[worst] << ", beyond its bound "
                                  << bound[worst];
    }
  }

 private:
  // Whether element i of `name` is in a key bias (see is_qkv_bias).
  static bool is_key_bias(const nn::GPTConfig& cfg, const std::string& name, int64_t i) {
    const int64_t q = cfg.n_head * cfg.head_dim(), kv = cfg.n_kv_head * cfg.head_dim();
    return is_qkv_bias(name) && i >= q && i < q + kv;
  }

  struct State {
    std::vector<double> v, err, bound;
  };
  nn::AdamWOptions opt_;
  int64_t t_ = 0;
  std::map<std::string, State> state_;
};

// One process's gradients, named.
nn::StateDict grads_of(const nn::Module& model) {
  nn::StateDict g;
  for (const auto& [name, p] : model.named_parameters()) g.emplace_back(name, p.grad());
  return g;
}

// Two forward and backward passes in f64 of the tensor-parallel model and of one process:
// losses and every gathered gradient to f64 rounding (kF64), the proof that tensor
// parallelism computes what one process computes up to the order of its sums. (AdamW keeps f32
// master weights, so the f64 check stops at the gradients.)
void f64_gradients_match(const nn::GPTConfig& cfg, int t, bool sequence_parallel) {
  const std::string what = name_of(cfg, t, sequence_parallel) + " f64";
  auto tpo = make_tp(t, sequence_parallel);
  nn::GPT single(cfg, DType::f64);
  nn::ModelParallel mp;
  mp.tp = tpo;
  nn::GPT model(cfg, DType::f64, mp);
  for (int64_t step = 0; step < 2; ++step) {
    const Tensor idx = batch(2, 8, cfg.vocab_size, 10 + uint64_t(step), false);
    const Tensor tgt = batch(2, 8, cfg.vocab_size, 20 + uint64_t(step), true);
    single.set_step(step);
    model.set_step(step);
    Tensor l1 = single.loss(idx, tgt);
    Tensor lt = model.loss(idx, tgt);
    const std::string at = " at step " + std::to_string(step);
    expect_close(lt, l1, kF64, what + " loss" + at);
    l1.backward();
    lt.backward();
    expect_dicts_close(tp::gather_full_grads(model, *tpo->group()), grads_of(single), kF64,
                       what + " grad" + at);
    single.zero_grad();
    model.zero_grad();
  }
}

// Three AdamW steps of the tensor-parallel model and of one process on the same batches.
void train_and_compare(const nn::GPTConfig& cfg, int t, bool sequence_parallel) {
  const std::string what = name_of(cfg, t, sequence_parallel);
  auto tpo = make_tp(t, sequence_parallel);
  nn::GPT single(cfg);
  nn::ModelParallel mp;
  mp.tp = tpo;
  nn::GPT model(cfg, DType::f32, mp);
  auto& group = *tpo->group();

  // Same keys, sliced: the gathered initial weights are the single-process weights exactly.
  const nn::StateDict init = tp::gather_full_state_dict(model, group);
  const nn::StateDict single_init = single.state_dict();
  ASSERT_EQ(init.size(), single_init.size());
  for (size_t i = 0; i < init.size(); ++i)
    expect_equal(init[i].second, single_init[i].second, what + " init " + init[i].first);

  nn::AdamWOptions opt;
  opt.lr = 1e-3;
  const int64_t steps = 3;
  nn::AdamW adam_single(single.named_parameters(), opt), adam(model.named_parameters(), opt);
  AdamDrift drift(opt);
  for (int64_t step = 0; step < steps; ++step) {
    const Tensor idx = batch(2, 8, cfg.vocab_size, 10 + uint64_t(step), false);
    const Tensor tgt = batch(2, 8, cfg.vocab_size, 20 + uint64_t(step), true);
    single.set_step(step);
    model.set_step(step);
    Tensor l1 = single.loss(idx, tgt);
    Tensor lt = model.loss(idx, tgt);
    const std::string at = " at step " + std::to_string(step);
    expect_close(lt, l1, kF32, what + " loss" + at);
    l1.backward();
    lt.backward();
    // Gathered gradients have the single-process shapes (the vocabulary padding cut off).
    expect_grads_close(tp::gather_full_grads(model, group), grads_of(single), cfg, idx,
                       what + " grad" + at);
    drift.add_step(grads_of(single), cfg);
    adam_single.step();
    adam.step();
    adam_single.zero_grad();
    adam.zero_grad();
  }
  drift.expect_within(tp::gather_full_state_dict(model, group), single.state_dict(),
                      what + " weights after 3 AdamW steps");
}

RANK_TEST(TensorParallelModelN2, F64LossAndGradientsMatchOneProcess) {
  for (bool sp : {false, true}) {
    f64_gradients_match(gpt2_config(2), 2, sp);
    f64_gradients_match(llama_config(2), 2, sp);
  }
}
RANK_TEST(TensorParallelModelN4, F64LossAndGradientsMatchOneProcess) {
  f64_gradients_match(gpt2_config(4), 4, true);
  f64_gradients_match(llama_config(4), 4, false);
}
RANK_TEST(TensorParallelModelN2, Gpt2MatchesOneProcess) {
  train_and_compare(gpt2_config(2), 2, false);
}
RANK_TEST(TensorParallelModelN2, Gpt2SequenceParallelMatchesOneProcess) {
  train_and_compare(gpt2_config(2), 2, true);
}
RANK_TEST(TensorParallelModelN2, LlamaGqaMatchesOneProcess) {
  train_and_compare(llama_config(2), 2, false);
}
RANK_TEST(TensorParallelModelN2, LlamaGqaSequenceParallelMatchesOneProcess) {
  train_and_compare(llama_config(2), 2, true);
}
RANK_TEST(TensorParallelModelN4, Tp4MatchesOneProcess) {
  train_and_compare(gpt2_config(4), 4, true);
  train_and_compare(llama_config(4), 4, false);
}
RANK_TEST(TensorParallelModelN4, Tp2TwiceMatchesOneProcess) {
  // Two tp=2 groups side by side (dp = 2), each on its own.
  train_and_compare(llama_config(2), 2, true);
}

RANK_TEST(TensorParallelModelN2, LayoutErrorsAreClear) {
  const int t = world_size();
  nn::GPTConfig cfg = gpt2_config(t);
  cfg.n_head = cfg.n_kv_head = 1;
  nn::ModelParallel mp;
  mp.tp = make_tp(t, true);
  try {
    nn::GPT model(cfg, DType::f32, mp);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("n_head (1) must be divisible by the tensor-parallel "
                                         "size (2)"),
              std::string::npos)
        << e.what();
  }
  nn::GPT model(gpt2_config(t), DType::f32, mp);
  const Tensor idx = batch(1, 7, 29, 1, false), tgt = batch(1, 7, 29, 2, true);
  try {
    model.loss(idx, tgt);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence length (7"), std::string::npos) << e.what();
  }
  EXPECT_NE(model.describe_parallel().find("vocabulary 29 padded to 32"), std::string::npos)
      << model.describe_parallel();
}

RANK_TEST(TensorParallelModelN2, VocabularyPaddedToDivide) {
  // 29 tokens pad to 32 both for one process (a multiple of 8) and for tp = 2 (of 16), so use
  // 33: 40 for one process, 48 under tp = 2. The extra rows are zero and cut from gathered
  // tensors.
  const int t = world_size();
  nn::GPTConfig cfg = gpt2_config(t);
  cfg.vocab_size = 33;
  auto tpo = make_tp(t, false);
  nn::ModelParallel mp;
  mp.tp = tpo;
  nn::GPT model(cfg, DType::f32, mp);
  EXPECT_EQ(cfg.padded_vocab_size(), 40);
  EXPECT_EQ(model.vocab_rows(), 48);
  EXPECT_EQ(model.param_meta("wte.weight").unpadded_size, 40);
  EXPECT_EQ(tp::gather_full_state_dict(model, *tpo->group())[0].second.shape(),
            Shape({40, cfg.n_embd}));
  const Tensor idx = batch(2, 4, 33, 3, false);
  nn::GPT single(cfg);
  expect_close(model.loss(idx, batch(2, 4, 33, 4, true)),
               single.loss(idx, batch(2, 4, 33, 4, true)), kF32, "padded vocabulary loss");
  // Full logits for inference: every rank's slice gathered, the real columns as one process.
  NoGradGuard no_grad;
  Tensor logits = model.forward(idx);
  ASSERT_EQ(logits.shape(), Shape({2, 4, 48}));
  expect_close(ops::narrow(logits, 2, 0, 33), ops::narrow(single.forward(idx), 2, 0, 33), kF32,
               "gathered logits");
}

void greedy_generation(const nn::GPTConfig& cfg, bool sequence_parallel, bool use_cache) {
  nn::ModelParallel mp;
  mp.tp = make_tp(world_size(), sequence_parallel);
  nn::GPT model(cfg, DType::f32, mp), single(cfg);
  nn::GenerateOptions opt;
  opt.max_new_tokens = 6;
  opt.sampling.temperature = 0.0;
  opt.use_cache = use_cache;
  const Tensor prompt = batch(2, 3, cfg.vocab_size, 9, false);
  EXPECT_EQ(to_vector<int64_t>(nn::generate(model, prompt, opt)),
            to_vector<int64_t>(nn::generate(single, prompt, opt)))
      << "sp " << sequence_parallel << " cache " << use_cache;
}

RANK_TEST(TensorParallelModelN2, GreedyGenerationMatchesOneProcess) {
  const int t = world_size();
  greedy_generation(gpt2_config(t), false, true);
  greedy_generation(llama_config(t), true, true);
  // Without a cache every step runs the whole (odd-length) sequence: sequence parallelism is
  // skipped where the length does not divide.
  greedy_generation(llama_config(t), true, false);
}

}  // namespace
}  // namespace tessera::parallel
