// Tensor-parallel serving: rank 0 leads a serve::Engine over its shard and sends each
// iteration's plan to rank 1 (BroadcastPlanChannel over the tensor-parallel group), which runs
// the same forward on its shard. Requests arriving over time, with chunked prefill, blocks of 4
// and preemption, give each request the tokens of nn::generate on the single-process model.
//
// The weights are drawn with std 0.3 (tp_test_util's randomize) so that the top logits are far
// apart next to the ~1e-6 by which tensor parallelism's reordered sums move them
// (tp_model_test.cpp): greedy tokens are then the same.

#include <memory>
#include <vector>

#include "nn/tiny_models.h"
#include "tessera/serve/engine.h"
#include "tests/parallel/tp_test_util.h"

namespace tessera::parallel {
namespace {

using namespace testing;

std::vector<int32_t> prompt_of(int64_t length, int64_t vocab, uint64_t seed) {
  const std::vector<int64_t> v =
      to_vector<int64_t>(nn::testing::token_batch(1, length, vocab, seed));
  return std::vector<int32_t>(v.begin(), v.end());
}

std::vector<int32_t> alone(nn::GPT& model, const std::vector<int32_t>& prompt, int64_t n) {
  std::vector<int64_t> p(prompt.begin(), prompt.end());
  nn::GenerateOptions o;
  o.max_new_tokens = n;
  o.sampling.temperature = 0.0;
  const std::vector<int64_t> out = to_vector<int64_t>(
      nn::generate(model, from_vector<int64_t>(p, Shape{1, int64_t(p.size())}), o));
  return std::vector<int32_t>(out.begin() + int64_t(prompt.size()), out.end());
}

RANK_TEST(TpServeN2, ServedTokensEqualOneProcessGenerate) {
  set_num_threads(1);
  auto tpo = make_tp(2, false);
  const int rank = tpo->group()->rank();
  nn::GPTConfig c = nn::testing::tiny_llama();  // GQA: 4 query and 2 key/value heads
  c.block_size = 64;
  c.vocab_size = 61;
  nn::GPT single(c);
  randomize(single, 7);
  nn::ModelParallel mp;
  mp.tp = tpo;
  nn::GPT model(c, DType::f32, mp);
  tp::load_full_state_dict(model, single.state_dict(), rank, 2);

  std::shared_ptr<Communicator> group = tpo->group();
  auto broadcast = [group](const Tensor& t) { group->broadcast(t, 0); };
  // 6 sequences of up to 38 tokens need up to 58 blocks of 4: 20 force preemption.
  const serve::EngineOptions options{
      .num_blocks = 20,
      .block_size = 4,
      .limits = {.max_batch_tokens = 16, .max_running = 8, .chunked_prefill = true}};
  if (rank != 0) {
    serve::BroadcastPlanChannel leader(broadcast);
    serve::Engine(model, options).follow(leader);
    return;
  }
  serve::Engine engine(model, options, std::make_shared<serve::BroadcastPlanChannel>(broadcast));
  struct Release {  // the follower must end even when an assertion returns early
    serve::Engine& e;
    ~Release() { e.release_followers(); }
  } release{engine};

  constexpr int64_t kRequests = 6, kTokens = 12;
  std::vector<std::vector<int32_t>> prompts, served(kRequests);
  for (int64_t i = 0; i < kRequests; ++i)
    prompts.push_back(prompt_of(1 + 5 * i, c.vocab_size, 100 + uint64_t(i)));
  int64_t submitted = 0, finished = 0;
  for (int64_t iteration = 0; finished < kRequests; ++iteration) {
    ASSERT_LT(iteration, 1000) << "the engine stopped making progress";
    if (submitted < kRequests && iteration % 2 == 0) {  // arrivals while others run
      serve::Request r;
      r.prompt = prompts[size_t(submitted)];
      r.max_tokens = kTokens;
      r.sampling.temperature = 0.0;
      r.on_token = [&served, k = submitted](int32_t t) {
        served[size_t(k)].push_back(t);
        return true;
      };
      r.on_finish = [&finished](serve::FinishReason) { ++finished; };
      engine.submit(std::move(r));
      ++submitted;
    }
    engine.step();
  }
  EXPECT_GT(engine.stats().preemptions, 0) << "the cache was meant to be too small";
  for (int64_t i = 0; i < kRequests; ++i)
    EXPECT_EQ(served[size_t(i)], alone(single, prompts[size_t(i)], kTokens)) << "request " << i;
}

}  // namespace
}  // namespace tessera::parallel
