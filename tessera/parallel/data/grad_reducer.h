#pragma once
// GradReducer: gradients of a FlatLayout's parameters, averaged over the data-parallel group in
// buckets, launched from autograd's post-accumulate hooks while the backward pass goes on.
//
// A bucket is launched as soon as every parameter in it has its gradient for this backward
// pass AND every earlier bucket was launched: the launch order is then the same on every rank,
// as MPI requires of collectives on one communicator. Parameters that got no gradient hold
// their buckets back until finish() launches what is left.
//
// Every stage reduces a bucket with one reduce-scatter (average) into this rank's shard, so all
// stages add the same numbers in the same order:
//   ZeRO 0: gradients are views into a full flat buffer (autograd accumulates in place); the
//           reduced shards are all-gathered back in finish(), leaving the full average.
//   ZeRO 1: the same full buffer; only the shard is kept reduced (the optimizer reads nothing
//           else).
//   ZeRO 2/3: no full buffer. A parameter's gradient is copied into its bucket's staging
//           buffer (allocated when the bucket's first gradient arrives) and dropped; the bucket
//           is reduce-scattered into the persistent shard and its staging buffer is freed as
//           soon as that completes. Between steps only the shards exist.
//
// Gradient accumulation: on micro-batches with sync off, ZeRO 0/1 only accumulate locally
// (no communication, PyTorch's no_sync); ZeRO 2/3 reduce every micro-batch and accumulate the
// shards, because holding the full gradient until the last micro-batch is the memory they
// exist to save (DeepSpeed does the same).
//
// The all-reduce of ZeRO 0 is a reduce-scatter on the dp group and, once that is done, an
// all-gather on a second communicator over the same ranks, both issued here rather than with
// Communicator::all_reduce_async. A communicator needs every rank to issue its collectives in
// the same order; MPI's all-reduce issues its second half from inside test()/wait(), so with
// several buckets in flight ranks could interleave them differently. Here each communicator
// sees its collectives in bucket order whatever the timing: reduce-scatters as buckets fill,
// all-gathers as the reduce-scatters complete (noticed while polling from the hooks, so both
// halves overlap the backward pass).
//
// Tied buckets (FlatLayout) are summed over the tied group in finish() on the last micro-batch
// of a step, after the dp reduction.
//
// A shard-ready hook (set_shard_ready_hook) hears of each bucket as soon as its shard holds the
// step's final gradient, so an offloaded optimizer can start the bucket's download during
// backward: over NCCL as soon as the reduce-scatter is queued on the communication stream (the
// bucket was not accumulated into and has no tied copy), otherwise when the reducer sees the
// reduction complete, or from finish() for tied buckets and at ZeRO 0.
//
// Compression (grad_compression.h): bf16 sends each bucket as bf16 through the widening
// reduce-scatter (and, at ZeRO 0, all-gathers bf16 shards, widened in finish()). PowerSGD, on
// the steps after its warm-up, replaces both halves with its two all-reduces per bucket, P then
// Q, chained on the dp group one at a time in bucket order and driven from the hooks
// (progress_powersgd says why one chain: with several MPI all-reduces in flight the main job's
// model at powersgd:16 exchanged wrong buffers and its residual reached 1.9e18; with two
// queues on two groups a blocking wait could deadlock). Buckets with nothing to compress are
// all-reduced whole, as a link of the same chain.

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tessera/parallel/comm/communicator.h"
#include "tessera/parallel/data/flat_layout.h"
#include "tessera/parallel/data/grad_compression.h"
#include "tessera/parallel/data/powersgd.h"

namespace tessera::parallel {

struct ReduceStats {
  int64_t launched_in_backward = 0;  // buckets launched from hooks, before backward returned
  int64_t launched_in_finish = 0;    // buckets finish() had to launch
  int64_t gathered_in_backward = 0;  // ZeRO 0: all-gathers issued before backward returned
  // PowerSGD: the most all-reduces ever in flight at once (1 by design: progress_powersgd).
  int64_t powersgd_in_flight = 0;
  // Shards the shard-ready hook heard of before backward returned (from the hooks).
  int64_t ready_in_backward = 0;
};

// When the last backward pass's reductions ran, in seconds from its first gradient: each
// bucket's launch and the moment its reduction was seen complete (a poll from a gradient hook,
// or finish()'s wait), next to when backward handed over to finish() and when finish()
// returned. A bucket completed before `finish_start` was hidden behind backward's compute.
// "Complete" is the reduce-scatter into the shard (at ZeRO 0 the all-gather back follows it on
// the second communicator and is not timed), or PowerSGD's Q link; `completed` stays 0 for a
// bucket that needed no collective (ZeRO 0 on a group of one).
struct ReduceEvent {
  int bucket = 0;
  double launched = 0, completed = 0;
};
struct ReduceTimeline {
  std::vector<ReduceEvent> events;  // in launch order
  double finish_start = 0, finish_end = 0;
};

class GradReducer {
 public:
  // Registers a post-accumulate hook on every parameter of the layout. Parameters must already
  // sit in flat storage (FlatParams). The communicators must outlive this object. `tied_group` (may
  // be null) sums tied buckets' reduced gradients with their copies on other pipeline stages.
  // `compression` must fit the stage (grad_compression_error); on a group of one it is a no-op.
  // `overlap` false launches every bucket from finish() instead of from the hooks (the
  // reference an overlap measurement compares against).
  GradReducer(const FlatLayout& layout, int stage, Communicator& dp, Communicator* tied_group,
              GradCompression compression = {}, bool overlap = true);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // False for the micro-batches before the last of a step (see the header comment).
  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }
  // The optimizer step the next reduction belongs to (PowerSGD's warm-up counts these). Set
  // before each backward pass; constant within a step.
  void set_step(int64_t step);
  // Whether this step's reduction runs PowerSGD (after its warm-up).
  bool compressing() const { return compressing_; }
  const GradCompression& compression() const { return compression_; }
  // PowerSGD's state (residuals, Q), or null.
  const PowerSgd* powersgd() const { return powersgd_.get(); }
  // Call after each backward pass: launches the buckets still waiting and waits for every
  // reduction of this micro-batch. Collective over the dp group.
  void finish();
  // Zeroes the gradients for the next step.
  void zero_grad();

  // Called once per bucket on a step's last micro-batch, as soon as shard_grad(bucket) holds
  // the reduced gradient the optimizer will read. `after_compute`: the shard's last write
  // was on the compute stream or the host, so a device copy of it must follow the compute
  // stream's work so far; false: it is the reduce-scatter just queued on the communication
  // stream (Work::on_comm_stream), so a copy ordered after that stream's work so far sees it.
  using ShardReadyHook = std::function<void(int bucket, bool after_compute)>;
  void set_shard_ready_hook(ShardReadyHook hook) { shard_ready_ = std::move(hook); }

  // This rank's reduced shard of bucket b's gradient (the average over the dp group).
  Tensor shard_grad(int b) const;
  // Bucket b's full gradient (ZeRO 0/1 only): after finish(), at ZeRO 0, the average.
  Tensor full_grad(int b) const;

  const ReduceStats& stats() const { return stats_; }
  const ReduceTimeline& timeline() const { return timeline_; }
  // Gradient memory this rank holds now, in bytes.
  int64_t held_bytes() const;

 private:
  // What a Pending's collective is.
  enum class Phase : uint8_t {
    scatter,  // the reduce-scatter of a bucket
    p,        // PowerSGD: the all-reduce of a bucket's P buffer
    q,        // PowerSGD: the all-reduce of its Q buffer, the next link of the chain
    whole,    // PowerSGD step: the all-reduce of a bucket with nothing to compress
  };
  struct Pending {
    int bucket = 0;
    std::shared_ptr<Work> work;
    Tensor out;        // where the reduce-scatter wrote
    bool add = false;  // out is a temporary to add into the shard (accumulation, ZeRO 2/3)
    Phase phase = Phase::scatter;
    size_t event = 0;  // its entry in timeline_
  };

  void on_grad(int param);
  void launch_ready(bool in_backward);
  void launch(int b, bool in_backward);
  void launch_powersgd(int b);
  void poll();
  // PowerSGD steps: runs the chain of P and Q all-reduces, waiting for each link when `block`,
  // else stopping at the first not yet done (issued, so it moves meanwhile).
  void progress_powersgd(bool block);
  // After a bucket's PowerSGD reduction: ZeRO 1 copies this rank's shard out of the average.
  void finish_powersgd_bucket(int b);
  void complete(Pending& p, bool in_backward);
  // Whether bucket b is summed over the tied group in finish(), after its dp reduction.
  bool tied_later(int b) const;
  // Tells the shard-ready hook about bucket b once per step's last micro-batch.
  void shard_ready(int b, bool after_compute, bool in_backward);
  void issue_gathers(bool in_backward);
  Tensor staging(int b);

  const FlatLayout& layout_;
  int stage_;
  Communicator* dp_;
  Communicator* tied_;
  int rank_;
  bool sync_ = true;

  std::vector<Tensor> full_;                       // per space (ZeRO 0/1)
  std::vector<Tensor> shards_;                     // per space (ZeRO 1-3)
  std::vector<std::shared_ptr<Storage>> staging_;  // per bucket (ZeRO 2/3)
  std::vector<bool> shard_written_;                // per bucket, this step (ZeRO 2/3)
  std::vector<int> arrived_;                       // per bucket, this micro-batch
  int next_launch_ = 0;
  std::vector<Pending> pending_;
  std::shared_ptr<Communicator> gather_;  // ZeRO 0: the all-gathers' communicator
  std::vector<Tensor> reduced_;           // ZeRO 0: per bucket, the reduced shard
  int next_gather_ = 0;                   // ZeRO 0: buckets gathered, in order
  std::vector<std::shared_ptr<Work>> gathers_;
  std::vector<Tensor> wire_;  // ZeRO 0 bf16: per bucket, the gathered bf16 gradient
  GradCompression compression_;
  bool bf16_ = false;  // compression is bf16 (and the group has peers)
  std::unique_ptr<PowerSgd> powersgd_;
  bool compressing_ = false;             // this step runs PowerSGD
  ReduceStats stats_;
  ShardReadyHook shard_ready_;
  std::vector<bool> announced_;  // per bucket, this pass: the hook has heard of it
  bool overlap_ = true;
  ReduceTimeline timeline_;
  std::chrono::steady_clock::time_point pass_start_;
  bool pass_open_ = false;  // a gradient of this pass has arrived
  double now() const;
  void completed(const Pending& p);
  // Hooks outlive this object on the parameters; they hold this weakly.
  std::shared_ptr<GradReducer*> self_;
};

}  // namespace tessera::parallel
