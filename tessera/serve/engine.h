#pragma once
// Engine: a model served by continuous batching over a paged KV cache. Requests arrive from
// any thread (submit, cancel); one thread calls step(), which runs one iteration: the
// scheduler's plan (scheduler.h), one GPT::forward_paged over all its tokens, then a token
// sampled for every sequence whose segment reached its end. Tokens and the finish are handed
// to the request's callbacks on the stepping thread; on_finish runs after stats() already
// shows the request's blocks freed, so a client that has its answer never reads stale gauges.
//
//   serve::Engine engine(model, {.num_blocks = 512, .block_size = 16});
//   engine.submit({.prompt = ids, .max_tokens = 64, .on_token = ..., .on_finish = ...});
//   while (engine.step()) {}
//
// A request's tokens do not depend on what else runs: each token attends only to its own
// sequence, and its sampling draw is that of nn::generate for the request alone (Philox
// position = the number of tokens generated so far of the request's seed), so a greedy or
// seeded request gives what `tessera generate` gives for it alone.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tessera/nn/generate.h"
#include "tessera/nn/gpt.h"
#include "tessera/nn/paged_kv_cache.h"
#include "tessera/serve/block_allocator.h"
#include "tessera/serve/iteration_plan.h"
#include "tessera/serve/scheduler.h"

namespace tessera::serve {

struct EngineOptions {
  int64_t num_blocks = 256;  // KV-cache blocks (each block_size positions of every layer)
  int64_t block_size = 16;
  SchedulerLimits limits;
};

// Why a request ended: a callback said stop (an end-of-text token or a stop string), its
// token limit or the context (block_size) ran out, or it was cancelled.
enum class FinishReason { stop, length, cancelled };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "cancelled"

struct Request {
  std::vector<int32_t> prompt;  // ids in [0, vocab_size), at least one
  int64_t max_tokens = 16;      // generated tokens at most (the context may end it sooner)
  nn::SamplingOptions sampling;
  // Each generated token; returning false ends the request ("stop") after it.
  std::function<bool(int32_t token)> on_token;
  std::function<void(FinishReason reason)> on_finish;
};

// Counters for metrics, read under the engine's lock.
struct EngineStats {
  int64_t running = 0, waiting = 0;
  int64_t kv_blocks_used = 0, kv_blocks_total = 0;
  int64_t prompt_tokens = 0, generated_tokens = 0;  // totals since start
  int64_t iterations = 0, preemptions = 0;
  double kv_usage() const { return kv_blocks_total ? double(kv_blocks_used) / kv_blocks_total : 0; }
};

class Engine {
 public:
  // The model is switched to eval mode and must not be used elsewhere while the engine runs.
  // Tensor parallel: the model is this rank's shard, and on the leader (rank 0) `followers`
  // reaches the other ranks, which run follow(); null with one rank.
  Engine(nn::GPT& model, EngineOptions options, std::shared_ptr<PlanChannel> followers = nullptr);

  // Queues a request; returns its id. Throws naming the problem when it can never run: no
  // prompt, an id outside the vocabulary, a prompt that fills the context, max_tokens < 1, a
  // sequence longer than the whole cache, or (without chunked prefill) a prompt longer than
  // max_batch_tokens; bad sampling options.
  int64_t submit(Request request);
  // Ends a request at the next iteration boundary (a disconnected client): its blocks are
  // freed and on_finish gets `cancelled`. Unknown or finished ids are ignored.
  void cancel(int64_t id);
  // Runs one iteration; false when there was nothing to run.
  bool step();
  // On the stepping thread, between steps: returns at once when there is work, else waits up
  // to `timeout` for a submit or a cancel. Whether there is work now.
  bool wait_for_work(std::chrono::milliseconds timeout);
  EngineStats stats() const;

  // Tensor parallel, the leader: call when wait_for_work found nothing; at most once a second it
  // sends the followers an idle plan, so their wait never reaches the group's timeout.
  void idle();
  // The leader: sends the followers stop, after which their follow() returns.
  void release_followers();
  // A follower rank (an engine over this rank's shard, with the leader's options): runs each
  // plan `leader` sends through the model until a stop. Its pool then holds, for its own heads,
  // what the leader's holds.
  void follow(PlanChannel& leader);
  const EngineOptions& options() const { return options_; }
  int64_t context_length() const { return model_.config().block_size; }

 private:
  struct Active {
    std::shared_ptr<Sequence> sequence;
    Request request;
  };
  void finish(int64_t id, FinishReason reason);  // frees now, notifies in publish()
  void publish(int64_t generated, bool ran);      // stats, then the finished callbacks
  Tensor run(IterationPlan plan);                 // forward_paged: logits [segments, rows]
  void send(const IterationPlan& plan);

  nn::GPT& model_;
  EngineOptions options_;
  std::shared_ptr<PlanChannel> followers_;
  nn::PagedKVCache cache_;
  BlockAllocator blocks_;
  Scheduler scheduler_;
  mutable std::mutex mutex_;  // guards what submit and cancel touch: inbox_, cancels_, stats_
  std::condition_variable arrived_;
  std::vector<Active> inbox_;
  std::vector<int64_t> cancels_;
  EngineStats stats_;
  int64_t next_id_ = 1;
  std::chrono::steady_clock::time_point last_sent_ = std::chrono::steady_clock::now();
  std::unordered_map<int64_t, Active> active_;  // the stepping thread's own
  std::vector<std::pair<Request, FinishReason>> finished_;  // this step's, not yet notified
};

}  // namespace tessera::serve
