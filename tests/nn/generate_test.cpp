// Generation: the KV cache against full recomputation (tokens and logits), for GPT-2 and
// Llama-style models, and sampling: determinism under a seed, temperature, top-k and top-p.

#include <gtest/gtest.h>

#include <cmath>

#include "nn/tiny_models.h"

namespace tessera::nn {
namespace {

using testing::tiny_gpt2;
using testing::tiny_llama;
using testing::token_batch;

// Greedy decoding picks the argmax, so any disagreement between the cached and the full
// computation beyond round-off would change the tokens.
void expect_cache_matches_recompute(const GPTConfig& c) {
  GPT m(c);
  Tensor prompt = token_batch(2, 3, c.vocab_size, 61);
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.sampling.temperature = 0.0;
  Tensor cached = generate(m, prompt, o);
  o.use_cache = false;
  Tensor full = generate(m, prompt, o);
  ASSERT_EQ(cached.shape(), (Shape{2, 15}));
  EXPECT_EQ(to_vector<int64_t>(cached), to_vector<int64_t>(full));
  EXPECT_EQ(to_vector<int64_t>(ops::narrow(cached, 1, 0, 3)), to_vector<int64_t>(prompt));

  // Logits of every cached step against the last row of a full forward pass.
  NoGradGuard no_grad;
  m.eval();
  KVCache cache(c, 2);
  Tensor seq = ops::cast(cached, DType::i64);
  Tensor step_logits = m.forward(ops::narrow(seq, 1, 0, 3), &cache);
  for (int64_t t = 3; t <= 14; ++t) {
    Tensor ref = m.forward(ops::contiguous(ops::narrow(seq, 1, 0, t)));
    Tensor last = ops::narrow(step_logits, 1, step_logits.size(1) - 1, 1);
    // Same weights, same sums in another grouping (one query against the cache instead of a
    // causal block): f32 round-off of O(1) logits, ~1e-6.
    CloseReport r = compare_close(last, ops::narrow(ref, 1, t - 1, 1), 1e-4, 1e-5);
    EXPECT_TRUE(r.ok) << "position " << t - 1 << ": " << r.message;
    if (t < 14) step_logits = m.forward(ops::contiguous(ops::narrow(seq, 1, t, 1)), &cache);
  }
  EXPECT_EQ(cache.length(), 14);
}

TEST(Generate, GreedyWithCacheEqualsRecomputeGpt2) {
  expect_cache_matches_recompute(tiny_gpt2());
}

TEST(Generate, GreedyWithCacheEqualsRecomputeLlamaRopeGqa) {
  expect_cache_matches_recompute(tiny_llama());
}

TEST(Generate, SamplingIsReproducibleUnderASeed) {
  GPT m(tiny_llama());
  Tensor prompt = token_batch(3, 2, 23, 62);
  GenerateOptions o;
  o.max_new_tokens = 10;
  o.sampling.temperature = 1.5;  // flattens the near-uniform init further
  o.sampling.seed = 1234;
  std::vector<int64_t> a = to_vector<int64_t>(generate(m, prompt, o));
  EXPECT_EQ(to_vector<int64_t>(generate(m, prompt, o)), a);
  o.use_cache = false;
  EXPECT_EQ(to_vector<int64_t>(generate(m, prompt, o)), a);  // the cache does not change draws
  o.sampling.seed = 1235;
  EXPECT_NE(to_vector<int64_t>(generate(m, prompt, o)), a);
  // Generation leaves the model in the mode it found it.
  EXPECT_TRUE(m.is_training());
}

// Inverting the CDF on a grid of u: the counts of each token follow its probability, and
// tokens outside top-k / the nucleus never appear.
std::vector<int> histogram(const std::vector<float>& logits, const SamplingOptions& o, int n) {
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) ++counts[size_t(sample_token(logits, o, (i + 0.5) / n))];
  return counts;
}

TEST(Sampling, TemperatureTopKAndTopP) {
  // Probabilities 0.5, 0.3, 0.15, 0.05 in a shuffled order.
  const std::vector<float> logits{float(std::log(0.15)), float(std::log(0.5)),
                                  float(std::log(0.05)), float(std::log(0.3))};
  SamplingOptions o;
  std::vector<int> c = histogram(logits, o, 1000);
  // A grid of 1000 points puts within 1 of 1000 * p in each bucket (plus f32 logits).
  EXPECT_NEAR(c[1], 500, 2);
  EXPECT_NEAR(c[3], 300, 2);
  EXPECT_NEAR(c[0], 150, 2);
  EXPECT_NEAR(c[2], 50, 2);
  o.top_k = 2;  // 0.5 and 0.3, renormalised to 5/8 and 3/8
  c = histogram(logits, o, 1000);
  EXPECT_EQ(c[0] + c[2], 0);
  EXPECT_NEAR(c[1], 625, 2);
  o.top_k = 0;
  o.top_p = 0.75;  // 0.5 + 0.3 reaches 0.75
  c = histogram(logits, o, 1000);
  EXPECT_EQ(c[0] + c[2], 0);
  EXPECT_GT(c[3], 0);
  o.top_p = 0.85;  // needs the 0.15 token too
  c = histogram(logits, o, 1000);
  EXPECT_EQ(c[2], 0);
  EXPECT_GT(c[0], 0);
  o.top_p = 0.1;  // the top token alone
  c = histogram(logits, o, 100);
  EXPECT_EQ(c[1], 100);
  o.top_p = 1.0;
  o.temperature = 0.0;  // greedy; ties go to the lower id
  EXPECT_EQ(sample_token(logits, o, 0.99), 1);
  EXPECT_EQ(sample_token(std::vector<float>{1, 3, 3}, o, 0.5), 1);
  // A low temperature sharpens: at 0.25, p ~ p^4 normalised, so the top token dominates.
  o.temperature = 0.25;
  c = histogram(logits, o, 1000);
  EXPECT_GT(c[1], 850);
}

TEST(Sampling, BadOptionsAndInputsThrow) {
  const std::vector<float> logits{0, 1};
  for (auto edit : std::vector<std::function<void(SamplingOptions&)>>{
           [](SamplingOptions& o) { o.temperature = -1; },
           [](SamplingOptions& o) { o.temperature = NAN; },
           [](SamplingOptions& o) { o.top_k = -1; }, [](SamplingOptions& o) { o.top_p = 0.0; },
           [](SamplingOptions& o) { o.top_p = 1.5; }}) {
    SamplingOptions o;
    edit(o);
    EXPECT_THROW(sample_token(logits, o, 0.5), Error);
  }
  EXPECT_THROW(sample_token(std::vector<float>{0, NAN}, SamplingOptions{}, 0.5), Error);
  EXPECT_THROW(sample_token(std::vector<float>{-INFINITY, -INFINITY}, SamplingOptions{}, 0.5),
               Error);
  EXPECT_THROW(sample_token(logits, SamplingOptions{}, 1.0), Error);

  GPT m(tiny_gpt2());
  GenerateOptions o;
  o.max_new_tokens = 14;
  EXPECT_THROW(generate(m, token_batch(1, 3, 23, 1), o), Error);  // 17 > block_size 16
  o.max_new_tokens = 2;
  EXPECT_THROW(generate(m, from_vector<int64_t>({30}, Shape{1, 1}), o), Error);
  EXPECT_THROW(generate(m, zeros(Shape{1, 2}), o), Error);
  o.max_new_tokens = -1;
  EXPECT_THROW(generate(m, token_batch(1, 3, 23, 1), o), Error);
  EXPECT_THROW(KVCache(tiny_gpt2(), 1, DType::f32, 17), Error);
  KVCache small(tiny_gpt2(), 1, DType::f32, 4);
  NoGradGuard no_grad;
  EXPECT_THROW(m.forward(token_batch(1, 5, 23, 1), &small), Error);
  EXPECT_THROW(m.forward(token_batch(2, 2, 23, 1), &small), Error);  // batch 2 vs 1
}

}  // namespace
}  // namespace tessera::nn
