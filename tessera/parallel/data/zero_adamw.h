#pragma once
// ZeroAdamW: AdamW over the flat buffers, with the optimizer state replicated (ZeRO 0) or
// sharded like the gradients (ZeRO >= 1): each rank updates only its shard of every bucket and
// holds exp_avg and exp_avg_sq for that shard alone.
//
// Weight decay applies to parameters with at least two dims (nn::decay_groups), but a shard
// cuts across parameters. The shard is therefore walked as per-parameter segments (FlatLayout
// offset arithmetic), and adjacent segments with the same decay are merged into runs, each one
// call of the fused ops::adamw_step_. A per-element decay mask would cost a buffer the size of
// the shard and a read per element; the runs cost nothing per step beyond a few dozen calls.
// Padding is never updated (it stays zero).
//
// The update is elementwise, so updating shards gives bit-for-bit the values a full update
// gives; the clip factor (and loss-scale) rides in AdamWArgs::grad_scale.
//
// Offloaded (ZeRO >= 1 over FlatParams with host shards): exp_avg and exp_avg_sq live in host
// memory beside the master shard. The reduced gradient shards come down bucket by bucket
// (HostTransfers): download_grad starts each as its reduction is queued or completes during
// backward (GradReducer's shard-ready hook), step() starts the rest and waits only for the
// bucket it is about to update. The update also writes the master rounded to the compute dtype
// into a host buffer, for the compute parameters to be gathered from
// (DataParallel::gather_rounded). The CPU and CUDA
// AdamW give the same bits (tests/cuda/adamw_kernels_test.cpp), so offloading changes where
// the update runs, never its result.

#include <cstdint>
#include <memory>
#include <vector>

#include "tessera/nn/optim/adamw.h"
#include "tessera/parallel/data/flat_params.h"
#include "tessera/parallel/data/grad_reducer.h"
#include "tessera/parallel/data/host_transfers.h"

namespace tessera::parallel {

class ZeroAdamW {
 public:
  // stage 0: full state; stage >= 1: this rank's shards. Parameters must be f32. With `host`
  // (stage >= 1, FlatParams offloaded through it), the state and the update are in host
  // memory, and `rounded` (bf16 or f16) is the dtype the updated master is rounded to there.
  ZeroAdamW(const FlatLayout& layout, int stage, int dp_rank, const nn::AdamWOptions& options,
            HostTransfers* host = nullptr, DType rounded = DType::f32);

  // One update of this rank's region from the reduced gradients, every gradient multiplied by
  // grad_scale first. Does not all-gather (the caller does, per stage).
  void step(const FlatParams& params, const GradReducer& grads, double grad_scale);

  // Offloaded: starts bucket b's reduced gradient shard down to host memory now, for the next
  // step() (GradReducer's shard-ready hook calls it; `after_compute` is the hook's).
  void download_grad(const GradReducer& grads, int b, bool after_compute);
  // Offloaded: how many buckets' downloads the last step() found started ahead of it.
  int64_t early_downloads() const { return early_downloads_; }
  // Offloaded: waits for the downloads in flight and forgets them (gradients about to be
  // zeroed, a skipped step).
  void drop_downloads();

  double lr() const { return options_.lr; }
  void set_lr(double lr);
  int64_t step_count() const { return step_; }
  // Restoring a rank's own saved moments (a node-local checkpoint): the update count they
  // belong to, which bias correction reads.
  void set_step_count(int64_t step) { step_ = step; }
  const nn::AdamWOptions& options() const { return options_; }
  // exp_avg and exp_avg_sq memory this rank holds on the parameters' device, in bytes; and in
  // host memory (offloaded: the moments, the gradient downloads and the rounded copy).
  int64_t held_bytes() const;
  int64_t host_bytes() const;
  bool offloaded() const { return host_ != nullptr; }

  // Offloaded: this rank's shard of bucket b's master rounded to the compute dtype, in host
  // memory, current with `params` (rounded again here if they were written since the last
  // update, as a checkpoint load does).
  Tensor rounded_shard(const FlatParams& params, int b);

  // exp_avg (slot 0) or exp_avg_sq (slot 1) of bucket b's region: the whole bucket at ZeRO 0,
  // this rank's shard otherwise.
  Tensor state_of(int slot, int b) const;

  // The whole optimizer state in nn::AdamW::state_dict()'s format (tensors
  // "<param>.exp_avg" / ".exp_avg_sq", groups from nn::decay_groups), so one checkpoint
  // serves every layout. Every rank gathers all of it (2 x the parameters, for the call's
  // duration); on one rank the tensors are views of the live moments instead (no copy: use
  // them before the next step). Collective over dp.
  nn::OptimizerState gather_state(Communicator& dp) const;
  // gather_state's scalars (step, lr, hyperparameters, groups over this rank's parameters)
  // without its tensors. Local.
  nlohmann::json scalars() const;
  // Restores such a state (validated by nn::AdamW::load_state_dict) into this rank's region.
  void load_state(const nn::OptimizerState& state);
  // Restores only the scalars of such a state (validated as load_state's), for a caller that
  // fills this rank's moments itself (a sharded checkpoint read into state_of()).
  void load_scalars(const nlohmann::json& scalars);

 private:
  struct Run {
    int bucket = 0;
    int64_t offset = 0;  // from the start of the bucket's region
    int64_t length = 0;
    bool decay = false;  // weight decay applies (parameters with >= 2 dims)
  };

  // An nn::AdamW over the layout's parameters: the reference format (it reads only their
  // shapes, so it works while ZeRO-3 has them freed).
  std::unique_ptr<nn::AdamW> format() const;
  // Bucket b's slice of a per-space host buffer (this rank's shard).
  Tensor host_region(const std::vector<Tensor>& per_space, int b) const;
  // The version of the storage holding this rank's master shard of `space`.
  uint64_t master_version(const FlatParams& params, int space) const;
  // The same over zero-element stand-ins (same names and ranks): the format's names, order and
  // scalars without moments of the parameters' size.
  std::unique_ptr<nn::AdamW> stand_in_format() const;

  const FlatLayout& layout_;
  int stage_;
  int rank_;
  nn::AdamWOptions options_;
  int64_t step_ = 0;
  std::vector<Run> runs_;
  std::vector<Tensor> m_, v_;  // per space
  // Offloaded: the downloads' gradient shards and the rounded master, per space, in host
  // memory, and the master shards' storage versions the rounded copy was made from.
  HostTransfers* host_ = nullptr;
  DType rounded_dtype_ = DType::f32;
  std::vector<Tensor> host_grads_, rounded_;
  std::vector<int> tickets_;  // per bucket: its download's HostTransfers ticket, or -1
  int64_t early_downloads_ = 0;
  std::vector<uint64_t> rounded_version_;
  Device device_;
};

}  // namespace tessera::parallel
