#pragma once
// Tensor-parallel serving: one leader rank runs the scheduler and the HTTP front end; the
// other ranks of the tensor-parallel group (followers) hold their shards of the model and of
// the KV cache and must run the same forward pass every iteration, since each layer's
// collectives need all of them. Before each forward the leader sends its followers the
// iteration's plan: the tokens, the segments and the block tables. Block ids are the same on
// every rank (each rank's pool holds its own heads of the same blocks), so a follower needs no
// allocator and no scheduler of its own.
//
//   leader:    plan = ...; channel.send(plan); model.forward_paged(...)   (then samples)
//   follower:  while (!(plan = channel.receive()).stop) model.forward_paged(...)
//
// serve owns the interface; tessera serve implements it over the tensor-parallel group's
// communicator through BroadcastPlanChannel (two broadcasts: the length, then the words
// encode_plan gives).

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "tessera/nn/paged_kv_cache.h"

namespace tessera::serve {

struct IterationPlan {
  std::vector<int32_t> tokens;  // the batch's tokens, in segment order
  std::vector<nn::PagedBatch::Segment> segments;
  std::vector<std::vector<int32_t>> tables;  // block tables, one row per sequence
  // Nothing to run: the followers keep waiting (an idle leader sends one now and then, so that
  // a follower's wait never reaches the group's timeout), or, with stop, return.
  bool idle() const { return segments.empty(); }
  bool stop = false;
};

// [stop, #tokens, #segments, #rows, tokens..., (row, start, length)..., (row length, blocks...)...]
std::vector<int32_t> encode_plan(const IterationPlan& plan);
// Throws naming the first word that does not fit the layout (a truncated or corrupted message).
IterationPlan decode_plan(std::span<const int32_t> words);

class PlanChannel {
 public:
  virtual ~PlanChannel() = default;
  virtual void send(const IterationPlan& plan) = 0;  // the leader
  virtual IterationPlan receive() = 0;               // a follower: blocks until the next plan
};

// A PlanChannel over a broadcast from the leader: `broadcast(t)` overwrites t on every rank of
// the group with the leader's t (a Communicator's broadcast with root 0, which serve does not
// depend on). Every rank calls it in the same order: send on the leader, receive elsewhere.
class BroadcastPlanChannel final : public PlanChannel {
 public:
  explicit BroadcastPlanChannel(std::function<void(const Tensor&)> broadcast)
      : broadcast_(std::move(broadcast)) {}
  void send(const IterationPlan& plan) override;
  IterationPlan receive() override;

 private:
  std::function<void(const Tensor&)> broadcast_;
};

}  // namespace tessera::serve
