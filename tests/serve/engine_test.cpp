// The serving engine end to end on small models: requests served together, with chunked
// prefill, tiny blocks and preemption, give exactly the tokens of each request generated alone
// (nn::generate with the contiguous KV cache); seeded sampling is that of generate too; a
// cancelled request frees its blocks; requests that can never run are refused by name.

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "nn/tiny_models.h"
#include "tessera/serve/engine.h"

namespace tessera::serve {
namespace {

using nn::testing::tiny_gpt2;
using nn::testing::tiny_llama;

nn::GPTConfig longer(nn::GPTConfig c) {
  c.block_size = 64;
  c.vocab_size = 61;
  c.n_embd = 32;
  return c;
}

// Random init at std 0.02 leaves attention nearly uniform and the next token decided by the
// current one, so a wrong position or a wrong key would hardly change the tokens. Scaled
// matrices make attention sharp and every token depend on its context.
void sharpen(nn::GPT& model) {
  for (const auto& [name, p] : model.named_parameters())
    if (p.dim() == 2) ops::mul_(p, name.find("wte") != std::string::npos ? 30.0 : 12.0);
}

// A quantized model has no full-precision block weights to scale: its embeddings and head are.
void sharpen_embeddings(nn::GPT& model) {
  for (const auto& [name, p] : model.named_parameters())
    if (p.dim() == 2) ops::mul_(p, 30.0);
}

std::vector<int32_t> prompt_of(int64_t length, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> ids;
  const std::vector<int64_t> v =
      to_vector<int64_t>(nn::testing::token_batch(1, length, vocab, seed));
  for (int64_t id : v) ids.push_back(int32_t(id));
  return ids;
}

// The request alone through nn::generate: what serving must reproduce.
std::vector<int32_t> alone(nn::GPT& model, const std::vector<int32_t>& prompt, int64_t max_tokens,
                           const nn::SamplingOptions& sampling) {
  std::vector<int64_t> p(prompt.begin(), prompt.end());
  nn::GenerateOptions o;
  o.max_new_tokens = max_tokens;
  o.sampling = sampling;
  const std::vector<int64_t> out = to_vector<int64_t>(
      nn::generate(model, from_vector<int64_t>(p, Shape{1, int64_t(p.size())}), o));
  return std::vector<int32_t>(out.begin() + int64_t(prompt.size()), out.end());
}

struct Served {
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::map<int64_t, FinishReason> finished;
};

Request request(std::vector<int32_t> prompt, int64_t max_tokens, Served& out, int64_t key,
                nn::SamplingOptions sampling = {.temperature = 0.0}) {
  Request r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling = sampling;
  r.on_token = [&out, key](int32_t t) {
    out.tokens[key].push_back(t);
    return true;
  };
  r.on_finish = [&out, key](FinishReason why) { out.finished[key] = why; };
  return r;
}

// Twelve requests of prompt lengths 1..57 arrive over the first iterations, served together.
void expect_concurrent_equals_alone(const nn::GPTConfig& config, EngineOptions options,
                                    bool expect_preemption) {
  nn::GPT model(config);
  sharpen(model);
  Engine engine(model, options);
  Served served;
  std::map<int64_t, std::vector<int32_t>> expected;
  int64_t submitted = 0, iterations = 0;
  auto submit = [&](int64_t k) {
    const int64_t length = 1 + (k * 23) % 57, max_tokens = std::min<int64_t>(5 + k, 63 - length);
    const std::vector<int32_t> p = prompt_of(length, config.vocab_size, uint64_t(100 + k));
    expected[k] = alone(model, p, max_tokens, {.temperature = 0.0});
    engine.submit(request(p, max_tokens, served, k));
  };
  for (; submitted < 4; ++submitted) submit(submitted);
  while (true) {
    if (submitted < 12 && iterations % 3 == 1) submit(submitted++);  // arrivals mid-flight
    const bool ran = engine.step();
    ++iterations;
    if (!ran && submitted == 12) break;
  }
  ASSERT_EQ(served.finished.size(), 12u);
  for (const auto& [k, want] : expected) {
    EXPECT_EQ(served.tokens[k], want) << "request " << k;
    EXPECT_EQ(served.finished[k], FinishReason::length);
  }
  const EngineStats stats = engine.stats();
  EXPECT_EQ(stats.kv_blocks_used, 0);  // every block came back
  EXPECT_EQ(stats.running + stats.waiting, 0);
  if (expect_preemption)
    EXPECT_GT(stats.preemptions, 0);
  else
    EXPECT_EQ(stats.preemptions, 0);
}

TEST(Engine, ConcurrentGreedyEqualsAloneGpt2) {
  expect_concurrent_equals_alone(longer(tiny_gpt2()),
                                 {.num_blocks = 256, .block_size = 16, .limits = {}}, false);
}

TEST(Engine, ConcurrentGreedyEqualsAloneLlamaChunkedPrefill) {
  // Odd blocks of 3 positions and a budget of 10 tokens: prompts are split across iterations.
  expect_concurrent_equals_alone(
      longer(tiny_llama()),
      {.num_blocks = 400, .block_size = 3, .limits = {.max_batch_tokens = 10, .max_running = 6}},
      false);
}

TEST(Engine, ConcurrentGreedyEqualsAloneUnderPreemption) {
  // 24 blocks of 4 = 96 positions for sequences of up to 63: sequences are preempted and
  // recomputed, and still give the same tokens.
  expect_concurrent_equals_alone(
      longer(tiny_llama()),
      {.num_blocks = 24, .block_size = 4, .limits = {.max_batch_tokens = 64, .max_running = 8}},
      true);
}

// Static batching, the benchmarks' baseline: whole batches of 5 whose prompts (all but their
// last tokens) are split over iterations of 10 tokens, then decoded together, give the same
// tokens as each request alone; arrivals mid-flight wait for the next batch.
TEST(Engine, StaticBatchesEqualAlone) {
  expect_concurrent_equals_alone(
      longer(tiny_llama()),
      {.num_blocks = 400,
       .block_size = 3,
       .limits = {.max_batch_tokens = 10, .max_running = 5, .static_batching = true}},
      false);
  // A pool too small for a whole batch: its newest members are preempted back to the queue,
  // and still every request gives its tokens alone.
  expect_concurrent_equals_alone(
      longer(tiny_llama()),
      {.num_blocks = 24,
       .block_size = 4,
       .limits = {.max_batch_tokens = 64, .max_running = 8, .static_batching = true}},
      true);
}

// A Q8_0 model through the paged path: every linear layer runs ops::linear_q8, whose rows are
// computed independently too.
TEST(Engine, QuantizedModelServedEqualsAlone) {
  nn::GPTConfig config = longer(tiny_llama());
  config.quantization = "q8_0";
  nn::GPT model(config);
  sharpen_embeddings(model);
  Engine engine(model, {.num_blocks = 64, .block_size = 4, .limits = {.max_batch_tokens = 16}});
  Served served;
  std::map<int64_t, std::vector<int32_t>> expected;
  for (int64_t k = 0; k < 5; ++k) {
    const std::vector<int32_t> p = prompt_of(2 + 5 * k, config.vocab_size, uint64_t(70 + k));
    expected[k] = alone(model, p, 10, {.temperature = 0.0});
    engine.submit(request(p, 10, served, k));
  }
  while (engine.step()) {
  }
  for (const auto& [k, want] : expected) EXPECT_EQ(served.tokens[k], want) << "request " << k;
}

TEST(Engine, SeededSamplingEqualsGenerate) {
  const nn::GPTConfig config = longer(tiny_gpt2());
  nn::GPT model(config);
  sharpen(model);
  Engine engine(model, {.num_blocks = 64, .block_size = 8, .limits = {}});
  Served served;
  std::map<int64_t, std::vector<int32_t>> expected;
  for (int64_t k = 0; k < 4; ++k) {
    const nn::SamplingOptions s{
        .temperature = 1.3, .top_k = 0, .top_p = 0.9, .seed = uint64_t(40 + k)};
    const std::vector<int32_t> p = prompt_of(3 + k, config.vocab_size, uint64_t(k));
    expected[k] = alone(model, p, 12, s);
    engine.submit(request(p, 12, served, k, s));
  }
  while (engine.step()) {
  }
  for (const auto& [k, want] : expected) EXPECT_EQ(served.tokens[k], want) << "request " << k;
}

TEST(Engine, StopsWhereTheCallbackSaysAndAtTheContext) {
  const nn::GPTConfig config = longer(tiny_gpt2());
  nn::GPT model(config);
  Engine engine(model, {.num_blocks = 64, .block_size = 8, .limits = {}});
  Served served;
  Request r = request(prompt_of(4, config.vocab_size, 1), 50, served, 0);
  r.on_token = [&served](int32_t t) {
    served.tokens[0].push_back(t);
    return served.tokens[0].size() < 3;  // a stop after the third token
  };
  engine.submit(std::move(r));
  engine.submit(request(prompt_of(60, config.vocab_size, 2), 50, served, 1));
  while (engine.step()) {
  }
  EXPECT_EQ(served.tokens[0].size(), 3u);
  EXPECT_EQ(served.finished[0], FinishReason::stop);
  EXPECT_EQ(served.tokens[1].size(), 4u);  // 60 + 4 = the 64-token context
  EXPECT_EQ(served.finished[1], FinishReason::length);
}

TEST(Engine, CancelFreesTheSlotAndItsBlocks) {
  const nn::GPTConfig config = longer(tiny_llama());
  nn::GPT model(config);
  Engine engine(model, {.num_blocks = 32, .block_size = 4, .limits = {}});
  Served served;
  const int64_t id = engine.submit(request(prompt_of(20, config.vocab_size, 3), 30, served, 0));
  engine.step();
  engine.step();
  EXPECT_EQ(engine.stats().kv_blocks_used, 6);  // 21 positions cached in blocks of 4
  engine.cancel(id);
  engine.cancel(12345);  // unknown: ignored
  EXPECT_FALSE(engine.step());
  EXPECT_EQ(served.finished[0], FinishReason::cancelled);
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  EXPECT_EQ(engine.stats().running, 0);
}

// A client that has its answer reads /metrics next: the gauges must already count the request
// gone. Each on_finish reads the stats from inside the callback.
TEST(Engine, FinishIsNotifiedAfterTheStatsShowTheBlocksFreed) {
  const nn::GPTConfig config = longer(tiny_gpt2());
  nn::GPT model(config);
  Engine engine(model, {.num_blocks = 32, .block_size = 4, .limits = {}});
  std::vector<EngineStats> seen;
  for (int64_t max_tokens : {3, 30}) {
    Request r;
    r.prompt = prompt_of(5, config.vocab_size, uint64_t(max_tokens));
    r.max_tokens = max_tokens;
    r.sampling = {.temperature = 0.0};
    r.on_finish = [&](FinishReason) { seen.push_back(engine.stats()); };
    const int64_t id = engine.submit(std::move(r));
    if (max_tokens == 30) {
      engine.step();
      engine.cancel(id);
    }
    while (engine.step()) {
    }
  }
  ASSERT_EQ(seen.size(), 2u);
  for (const EngineStats& s : seen) {
    EXPECT_EQ(s.running, 0);
    EXPECT_EQ(s.kv_blocks_used, 0);
  }
}

TEST(Engine, RefusesWhatCanNeverRun) {
  const nn::GPTConfig config = longer(tiny_gpt2());
  nn::GPT model(config);
  Engine engine(model, {.num_blocks = 4,
                        .block_size = 4,
                        .limits = {.max_batch_tokens = 8, .chunked_prefill = false}});
  Served served;
  auto refused = [&](Request r, const std::string& says) {
    try {
      engine.submit(std::move(r));
      ADD_FAILURE() << "accepted: " << says;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(request({}, 4, served, 0), "the prompt is empty");
  refused(request({1, 99}, 4, served, 0), "prompt token 1 is 99, outside the vocabulary [0, 61)");
  refused(request(prompt_of(64, 61, 1), 4, served, 0), "the prompt has 64 tokens");
  refused(request({1}, 0, served, 0), "max_tokens must be at least 1");
  refused(request({1, 2}, 20, served, 0), "needs 6 blocks of 4; the cache has 4");
  refused(request(prompt_of(9, 61, 1), 1, served, 0), "more than max_batch_tokens (8)");
  refused(request({1}, 2, served, 0, {.temperature = -1.0}), "temperature");
}

}  // namespace
}  // namespace tessera::serve
