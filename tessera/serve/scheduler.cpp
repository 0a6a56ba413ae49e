#include "tessera/serve/scheduler.h"

#include <algorithm>
#include <utility>

#include "tessera/core/error.h"

namespace tessera::serve {

void SchedulerLimits::validate() const {
  TESSERA_CHECK(max_batch_tokens >= 1, "scheduler: max_batch_tokens must be at least 1, got ",
                max_batch_tokens);
  TESSERA_CHECK(max_running >= 1, "scheduler: max_running must be at least 1, got ", max_running);
}

int64_t Iteration::num_tokens() const {
  int64_t n = 0;
  for (const ScheduledSegment& s : segments) n += s.length;
  return n;
}

Scheduler::Scheduler(SchedulerLimits limits, BlockAllocator& blocks)
    : limits_(limits), blocks_(blocks) {
  limits_.validate();
}

void Scheduler::add(std::shared_ptr<Sequence> sequence) {
  TESSERA_CHECK(
      sequence && !sequence->tokens.empty() && sequence->computed == 0 && sequence->blocks.empty(),
      "scheduler: a new sequence needs tokens, nothing computed and no blocks");
  waiting_.push_back(std::move(sequence));
}

void Scheduler::preempt(const std::shared_ptr<Sequence>& sequence, Iteration& iteration) {
  blocks_.release(sequence->blocks);
  sequence->computed = 0;
  ++sequence->preemptions;
  ++preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), sequence));
  waiting_.push_front(sequence);
  iteration.preempted.push_back(sequence->id);
}

Iteration Scheduler::schedule() {
  Iteration it;
  int64_t budget = limits_.max_batch_tokens;
  const bool may_admit = !limits_.static_batching;
  if (limits_.static_batching && running_.empty()) {
    // A static batch: up to max_running waiting requests form it at once, whatever this
    // iteration's budget, and none joins until all of it has left. (Admitting only what fit
    // one iteration's budget made a batch of 8 prompts of 45 tokens under a budget of 64 a
    // batch of two.) Their blocks grow as their prompts are computed, below.
    while (!waiting_.empty() && num_running() < limits_.max_running) {
      it.admitted.push_back(waiting_.front()->id);
      running_.push_back(waiting_.front());
      waiting_.pop_front();
    }
  }
  // A static batch computes its prompts but their last tokens first, then decodes together:
  // its first decode iteration samples every sequence's first token, as a padded batch's one
  // forward over its prompts would, so no TPOT holds another's prefill.
  const bool prefilling =
      limits_.static_batching &&
      std::any_of(running_.begin(), running_.end(), [](const std::shared_ptr<Sequence>& s) {
        return int64_t(s->tokens.size()) - s->computed > 1;
      });
  // The length of a sequence's next segment within the budget; 0 when it must wait.
  auto segment_length = [&](const Sequence& s) {
    const int64_t need = int64_t(s.tokens.size()) - s.computed - (prefilling ? 1 : 0);
    if (need <= 0) return int64_t(0);
    if (limits_.chunked_prefill) return std::min(need, budget);
    return need <= budget ? need : int64_t(0);
  };
  // 1. Running sequences, oldest first; the newest give way when blocks run out.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    const std::shared_ptr<Sequence> s = running_[i];
    const int64_t length = segment_length(*s);
    if (length == 0) {
      ++i;
      continue;
    }
    bool self_preempted = false;
    while (!blocks_.grow(s->blocks, s->computed + length)) {
      const std::shared_ptr<Sequence> victim = running_.back();
      self_preempted = victim == s;
      preempt(victim, it);
      if (self_preempted) break;
    }
    if (self_preempted) break;  // everything after it was preempted too
    it.segments.push_back(
        {s, s->computed, length, s->computed + length == int64_t(s->tokens.size())});
    budget -= length;
    ++i;
  }
  // 2. Admissions, in arrival order, unless this iteration had to preempt (the cache is full).
  while (may_admit && it.preempted.empty() && !waiting_.empty() && budget > 0 &&
         num_running() < limits_.max_running) {
    const std::shared_ptr<Sequence> s = waiting_.front();
    const int64_t length = segment_length(*s);
    if (length == 0 || !blocks_.grow(s->blocks, length)) break;  // it waits; so do those after
    waiting_.pop_front();
    running_.push_back(s);
    it.admitted.push_back(s->id);
    it.segments.push_back({s, 0, length, length == int64_t(s->tokens.size())});
    budget -= length;
  }
  return it;
}

void Scheduler::advance(const Iteration& iteration) {
  for (const ScheduledSegment& seg : iteration.segments)
    seg.sequence->computed = seg.start + seg.length;
}

bool Scheduler::remove(int64_t id) {
  auto matches = [id](const std::shared_ptr<Sequence>& s) { return s->id == id; };
  if (auto it = std::find_if(running_.begin(), running_.end(), matches); it != running_.end()) {
    blocks_.release((*it)->blocks);
    running_.erase(it);
    return true;
  }
  if (auto it = std::find_if(waiting_.begin(), waiting_.end(), matches); it != waiting_.end()) {
    blocks_.release((*it)->blocks);
    waiting_.erase(it);
    return true;
  }
  return false;
}

}  // namespace tessera::serve
