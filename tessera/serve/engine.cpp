#include "tessera/serve/engine.h"

#include <algorithm>
#include <span>
#include <utility>

#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"

namespace tessera::serve {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::stop:
      return "stop";
    case FinishReason::length:
      return "length";
    case FinishReason::cancelled:
      return "cancelled";
  }
  return "?";
}

namespace {
Device model_device(nn::GPT& model) {
  return model.named_parameters().front().second.device();
}
}  // namespace

Engine::Engine(nn::GPT& model, EngineOptions options, std::shared_ptr<PlanChannel> followers)
    : model_(model),
      options_(options),
      followers_(std::move(followers)),
      cache_(model.config(), options.num_blocks, options.block_size, model.dtype(), model.tp_size(),
             model_device(model)),
      blocks_(options.num_blocks, options.block_size),
      scheduler_(options.limits, blocks_) {
  model_.eval();
  stats_.kv_blocks_total = options.num_blocks;
}

int64_t Engine::submit(Request request) {
  const nn::GPTConfig& cfg = model_.config();
  const int64_t n = int64_t(request.prompt.size());
  TESSERA_CHECK(n > 0, "serve: the prompt is empty");
  for (int64_t i = 0; i < n; ++i)
    TESSERA_CHECK(request.prompt[size_t(i)] >= 0 && request.prompt[size_t(i)] < cfg.vocab_size,
                  "serve: prompt token ", i, " is ", request.prompt[size_t(i)],
                  ", outside the vocabulary [0, ", cfg.vocab_size, ")");
  TESSERA_CHECK(n < cfg.block_size, "serve: the prompt has ", n, " tokens; the context holds ",
                cfg.block_size, ", so at most ", cfg.block_size - 1, " leave room to generate");
  TESSERA_CHECK(request.max_tokens >= 1, "serve: max_tokens must be at least 1, got ",
                request.max_tokens);
  request.sampling.validate();
  const int64_t longest = std::min(n + request.max_tokens, cfg.block_size);
  TESSERA_CHECK(blocks_.blocks_for(longest) <= blocks_.num_blocks(), "serve: a sequence of up to ",
                longest, " tokens needs ", blocks_.blocks_for(longest), " blocks of ",
                options_.block_size, "; the cache has ", blocks_.num_blocks());
  TESSERA_CHECK(options_.limits.chunked_prefill || n <= options_.limits.max_batch_tokens,
                "serve: the prompt has ", n, " tokens, more than max_batch_tokens (",
                options_.limits.max_batch_tokens, ") without chunked prefill");
  auto sequence = std::make_shared<Sequence>();
  sequence->tokens = request.prompt;
  sequence->prompt_length = n;
  std::lock_guard<std::mutex> lock(mutex_);
  sequence->id = next_id_++;
  stats_.prompt_tokens += n;
  ++stats_.waiting;
  inbox_.push_back({std::move(sequence), std::move(request)});
  arrived_.notify_all();
  return inbox_.back().sequence->id;
}

void Engine::cancel(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  cancels_.push_back(id);
  arrived_.notify_all();
}

bool Engine::wait_for_work(std::chrono::milliseconds timeout) {
  if (scheduler_.num_running() + scheduler_.num_waiting() > 0) return true;
  std::unique_lock<std::mutex> lock(mutex_);
  return arrived_.wait_for(lock, timeout, [this] { return !inbox_.empty() || !cancels_.empty(); });
}

void Engine::finish(int64_t id, FinishReason reason) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  scheduler_.remove(id);
  finished_.emplace_back(std::move(it->second.request), reason);
  active_.erase(it);
}

void Engine::publish(int64_t generated, bool ran) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.running = scheduler_.num_running();
    stats_.waiting = scheduler_.num_waiting() + int64_t(inbox_.size());
    stats_.kv_blocks_used = blocks_.used_blocks();
    stats_.generated_tokens += generated;
    stats_.iterations += ran ? 1 : 0;
    stats_.preemptions = scheduler_.num_preemptions();
  }
  std::vector<std::pair<Request, FinishReason>> done;
  done.swap(finished_);
  for (auto& [request, reason] : done)
    if (request.on_finish) request.on_finish(reason);
}

bool Engine::step() {
  std::vector<Active> arrived;
  std::vector<int64_t> cancelled;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    arrived.swap(inbox_);
    cancelled.swap(cancels_);
  }
  for (Active& a : arrived) {
    scheduler_.add(a.sequence);
    active_.emplace(a.sequence->id, std::move(a));
  }
  for (int64_t id : cancelled) finish(id, FinishReason::cancelled);

  const Iteration it = scheduler_.schedule();
  int64_t generated = 0;
  if (!it.segments.empty()) {
    IterationPlan plan;
    for (const ScheduledSegment& s : it.segments) {
      plan.segments.push_back({int64_t(plan.tables.size()), s.start, s.length});
      plan.tables.push_back(s.sequence->blocks);
      plan.tokens.insert(plan.tokens.end(), s.sequence->tokens.begin() + s.start,
                         s.sequence->tokens.begin() + s.start + s.length);
    }
    send(plan);
    const Tensor logits = run(std::move(plan));  // sent already: its tables move into the batch
    const std::vector<float> host = to_vector<float>(logits);  // [segments, vocab_rows]
    scheduler_.advance(it);
    const int64_t rows = logits.size(1), vocab = model_.config().vocab_size;
    for (size_t i = 0; i < it.segments.size(); ++i) {
      const ScheduledSegment& s = it.segments[i];
      if (!s.samples) continue;
      Sequence& seq = *s.sequence;
      const Request& request = active_.at(seq.id).request;
      const double u = nn::sampling_uniform(request.sampling.seed, seq.generated(), 1, 0);
      const int32_t token = int32_t(
          nn::sample_token(std::span<const float>(host.data() + int64_t(i) * rows, size_t(vocab)),
                           request.sampling, u));
      seq.tokens.push_back(token);
      ++generated;
      const bool go = !request.on_token || request.on_token(token);
      if (!go)
        finish(seq.id, FinishReason::stop);
      else if (seq.generated() >= request.max_tokens ||
               int64_t(seq.tokens.size()) >= model_.config().block_size)
        finish(seq.id, FinishReason::length);
    }
  }
  publish(generated, !it.segments.empty());
  return !it.segments.empty();
}

Tensor Engine::run(IterationPlan plan) {
  const nn::PagedBatch batch = nn::make_paged_batch(
      std::move(plan.segments), std::move(plan.tables), cache_, model_.config().block_size);
  const Tensor ids =
      from_vector<int32_t>(plan.tokens, Shape{int64_t(plan.tokens.size())}, cache_.device());
  return ops::cast(model_.forward_paged(ids, batch, cache_), DType::f32);
}

void Engine::send(const IterationPlan& plan) {
  if (!followers_) return;
  followers_->send(plan);
  last_sent_ = std::chrono::steady_clock::now();
}

void Engine::idle() {
  if (followers_ && std::chrono::steady_clock::now() - last_sent_ > std::chrono::seconds(1))
    send(IterationPlan{});
}

void Engine::release_followers() {
  IterationPlan stop;
  stop.stop = true;
  send(stop);
}

void Engine::follow(PlanChannel& leader) {
  TESSERA_CHECK(!followers_, "serve: a leader engine cannot follow");
  for (IterationPlan plan = leader.receive(); !plan.stop; plan = leader.receive())
    if (!plan.idle()) run(std::move(plan));
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace tessera::serve
