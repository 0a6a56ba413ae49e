#pragma once
// Scheduler: iteration-level ("continuous") batching, as in Orca and vLLM. Every iteration
// runs one segment of every running sequence: its next token while decoding, a chunk of its
// prompt while prefilling. Waiting requests join at iteration boundaries, first come first
// served, while the token budget, the running limit and the free blocks allow; a request that
// does not fit waits in the queue (it is never failed for a full cache).
//
//   iteration:  1. running sequences, oldest first: 1 token each (decode) or the next prompt
//                  chunk (prefill), each growing its block table; when blocks run out, the
//                  newest running sequence is preempted (its blocks freed, sent back to the
//                  front of the queue; it recomputes its tokens when it returns)
//               2. then, with nothing preempted, waiting sequences in arrival order, while
//                  the budget (max_batch_tokens), max_running and the free blocks allow
//
// Static batching, the baseline: when the running set is empty, up to max_running waiting
// sequences form a batch at once; its prompts fill the budget iteration by iteration, then
// the batch decodes together until its last sequence ends, and only then does the next form.
//
// With chunked prefill a prompt longer than the budget left takes what is left and goes on
// next iteration, so a long prompt never stalls the running decodes for more than one
// budget's worth of tokens; without it a prompt waits until it fits whole.

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "tessera/serve/block_allocator.h"

namespace tessera::serve {

struct SchedulerLimits {
  int64_t max_batch_tokens = 512;  // tokens in one iteration (decodes and prefill chunks)
  int64_t max_running = 32;        // sequences in the running set
  bool chunked_prefill = true;
  // Static batching, the baseline continuous batching is measured against: max_running
  // waiting requests form a batch when the running set is empty, prefill, and decode
  // together until the longest ends, while finished slots stay idle.
  bool static_batching = false;
  // Throws naming the field.
  void validate() const;
};

// One request's sequence as the scheduler sees it.
struct Sequence {
  int64_t id = 0;
  std::vector<int32_t> tokens;  // the prompt, then every generated token
  int64_t prompt_length = 0;
  int64_t computed = 0;         // leading tokens whose keys and values are in the cache
  std::vector<int32_t> blocks;  // the block table
  int64_t preemptions = 0;
  int64_t generated() const { return int64_t(tokens.size()) - prompt_length; }
};

struct ScheduledSegment {
  std::shared_ptr<Sequence> sequence;
  int64_t start = 0, length = 0;  // tokens [start, start + length) of the sequence
  // The segment reaches the sequence's last token: its logits choose the next one.
  bool samples = false;
};

struct Iteration {
  std::vector<ScheduledSegment> segments;
  std::vector<int64_t> preempted, admitted;  // sequence ids
  int64_t num_tokens() const;
};

class Scheduler {
 public:
  Scheduler(SchedulerLimits limits, BlockAllocator& blocks);

  const SchedulerLimits& limits() const { return limits_; }
  // Queues a sequence (computed 0, no blocks). The caller has checked that it can ever run:
  // its longest length fits in the pool, and without chunked prefill in max_batch_tokens.
  void add(std::shared_ptr<Sequence> sequence);
  // Plans the next iteration and grows the block tables it writes. Empty when idle. The
  // caller runs it, then calls advance() with its result.
  Iteration schedule();
  // Marks the iteration's segments computed (their keys and values are in the cache).
  void advance(const Iteration& iteration);
  // Removes a sequence, running or waiting, and frees its blocks; false if unknown.
  bool remove(int64_t id);

  int64_t num_running() const { return int64_t(running_.size()); }
  int64_t num_waiting() const { return int64_t(waiting_.size()); }
  int64_t num_preemptions() const { return preemptions_; }

 private:
  void preempt(const std::shared_ptr<Sequence>& sequence, Iteration& iteration);

  SchedulerLimits limits_;
  BlockAllocator& blocks_;
  std::vector<std::shared_ptr<Sequence>> running_;  // in admission order
  std::deque<std::shared_ptr<Sequence>> waiting_;
  int64_t preemptions_ = 0;
};

}  // namespace tessera::serve
