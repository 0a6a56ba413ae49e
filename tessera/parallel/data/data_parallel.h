#pragma once
// DataParallel: data parallelism with ZeRO stages 0-3 over flat parameter and gradient
// buffers, with AdamW and global-norm clipping. The trainer's loop:
//
//   auto hooks = std::make_shared<DeferredUnitHooks>();    // ZeRO-3: the model calls these
//   nn::GPT model(gpt_config, DType::f32, {tp, stage, hooks});
//   DataParallel dp(model.named_parameters(), mesh.dp(), config);   // collective
//   hooks->set_target(dp.unit_hooks());
//   for each step:
//     dp.set_lr(schedule.lr(step));
//     for each micro-batch m of M:                 // this rank's slice of the global batch
//       dp.backward(model.loss(x, y) / M, m == M - 1);
//     StepResult r = dp.step();                    // norm, clip, update, gather
//     dp.zero_grad();
//
//   stage  parameters        gradients                   AdamW state  after backward
//   0      full              full, averaged              full         reduce-scatter, gather
//   1      full              full local + reduced shard  shard        reduce-scatter
//   2      full              reduced shard               shard        reduce-scatter
//   3      shard (+ a unit)  reduced shard               shard        reduce-scatter
//
// After the update, ZeRO 1/2 all-gather the parameters; ZeRO-3 keeps its shard and gathers
// each unit just in time (Zero3Hooks). Every stage reduces the same buckets with the same
// reduce-scatter and computes the norm over the same shards, so on one layout all four stages
// produce bit-identical weights (tests/parallel/dp_equivalence_test.cpp asserts it).
//
// Optimizer offload (offload_optimizer, ZeRO 1-3, for a master whose model computes through a
// separate low-precision copy: parallel_precision.h): the fp32 master shard, the AdamW moments
// and the update live in host memory (zero_adamw.h). The master is then sharded at every stage,
// with its shards on the host, so the device keeps only the gradients (ZeRO 1: full; 2/3: the
// shard) and the compute copy, which gather_rounded fills from the host's rounded shards.
//
// Nothing here is process-global: the object owns its buffers and communicator handle.

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tessera/nn/model_parallel.h"
#include "tessera/nn/module.h"
#include "tessera/nn/optim/adamw.h"
#include "tessera/parallel/comm/communicator.h"
#include "tessera/parallel/data/flat_layout.h"
#include "tessera/parallel/data/flat_params.h"
#include "tessera/parallel/data/grad_compression.h"
#include "tessera/parallel/data/grad_norm.h"
#include "tessera/parallel/data/grad_reducer.h"
#include "tessera/parallel/data/zero3_hooks.h"
#include "tessera/parallel/data/zero_adamw.h"

namespace tessera::parallel {

struct DataParallelConfig {
  int zero_stage = 0;                        // 0, 1, 2 or 3
  int64_t bucket_bytes = int64_t(25) << 20;  // bucket size when no units are given
  // Units of parameters (gpt_units()): required at ZeRO-3; below it, optional, and then the
  // buckets are the units (so every stage shares the layout of ZeRO-3).
  std::vector<UnitSpec> units;
  nn::AdamWOptions adamw;
  double max_grad_norm = 0.0;  // global-norm clipping; <= 0 disables it
  // What the dp reduction sends (grad_compression.h); refused on a group of one and where
  // grad_compression_error says it does not fit the stage.
  GradCompression compression;
  // ZeRO-3: all-gather the next unit while the current one computes (zero3_hooks.h).
  bool zero3_prefetch = true;
  // The master, the optimizer state and the update in host memory (see the header); ZeRO 1-3.
  // The model must not compute with these parameters (they stay off the device): its compute
  // copy is rounded to compute_dtype (bf16 or f16) on the host and filled by gather_rounded.
  bool offload_optimizer = false;
  DType compute_dtype = DType::bf16;
  // ZeRO-3 under mixed precision: the model's compute copy (the master's names and shapes, in
  // compute_dtype), sharded like the master and gathered per unit by compute_unit_hooks(), so
  // no rank holds it whole. Its shards are the master's rounded (sync_compute_shards), a local
  // cast, with no collective. Empty: the caller keeps its compute copy whole.
  nn::StateDict compute;
  // Start each bucket's reduction from the backward hooks as it fills; false: all of them
  // from finish(), after backward (what overlap is measured against).
  bool overlap = true;

  // The fills of deferred parameters (nn::ModelParallel::defer_parameters), by name: each rank
  // fills only its part of them straight into its flat buffers. They are not broadcast from
  // rank 0 as the others are: a fill is the same pure function of the name on every rank.
  // Deferred parameters of `compute` need none: they start at zero and the precision layer
  // rounds them from the master before any use. Empty: no parameter is deferred.
  ParamFillLookup param_fill;

  // Model parallelism around the dp group, for the global norm (grad_norm.h).
  std::function<nn::ParamMeta(const std::string&)> param_meta;  // empty: all replicated
  Communicator* tp = nullptr;              // replicated parameters count on its rank 0
  std::vector<Communicator*> norm_groups;  // further groups holding other parameters (pp)
  // Parameters whose gradients are summed with copies on other pipeline stages over
  // tied_group (each gets a bucket of its own so every stage shards it alike).
  std::set<std::string> tied;
  Communicator* tied_group = nullptr;
};

struct StepResult {
  double grad_norm = 0.0;  // of the gradients after grad_scale, before clipping
  bool finite = true;      // false: inf/NaN somewhere; nothing was updated
  double clip = 1.0;       // the clip factor applied
};

// Bytes this rank holds now in the buffers DataParallel owns (the model's activations and
// the trainer's own tensors are not counted).
struct MemoryStats {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
  int64_t parameters_peak = 0;  // ZeRO-3: the most parameter memory held during use
  // A sharded compute copy (DataParallelConfig::compute): held now, and the most held in use.
  int64_t compute = 0;
  int64_t compute_peak = 0;
  // Offloaded: host bytes of the master shard, the moments, the gradient downloads and the
  // rounded copy (none of which is in the figures above).
  int64_t offloaded = 0;
};

// Hooks a model can be built with before its DataParallel exists (DataParallel needs the
// model's parameters, nn::GPT takes its hooks at construction): forwards to the target set
// later (DataParallel::unit_hooks()), and is the identity while none is set.
class DeferredUnitHooks final : public nn::UnitHooks {
 public:
  void set_target(std::shared_ptr<nn::UnitHooks> target) { target_ = std::move(target); }
  Tensor before(const std::string& unit, const Tensor& x) override {
    return target_ ? target_->before(unit, x) : x;
  }
  Tensor after(const std::string& unit, const Tensor& x) override {
    return target_ ? target_->after(unit, x) : x;
  }

 private:
  std::shared_ptr<nn::UnitHooks> target_;
};

class DataParallel {
 public:
  // Moves `params` into flat buffers (their TensorImpls now point there) and, at ZeRO-3, keeps
  // only this rank's shard. Every rank must pass the same names and shapes, and the same
  // values (init is keyed, so models built alike agree). Collective over dp. The
  // communicators (dp and those in the config) must outlive this object.
  DataParallel(const nn::StateDict& params, Communicator& dp, DataParallelConfig config);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // ZeRO-3: the hooks the model calls around each unit; null below ZeRO-3.
  std::shared_ptr<nn::UnitHooks> unit_hooks() const { return hooks_; }
  // The same for the sharded compute copy (DataParallelConfig::compute), or null.
  std::shared_ptr<nn::UnitHooks> compute_unit_hooks() const { return compute_hooks_; }
  bool shards_compute() const { return compute_hooks_ != nullptr; }
  // Rounds this rank's master shards (offloaded: the host's rounded copy) into the compute
  // copy's shards and re-gathers what is held. Local: no collective unless units are held.
  void sync_compute_shards();

  // loss.backward() then finish(). `sync` false on all but the last micro-batch of a step.
  void backward(const Tensor& loss, bool sync = true);
  // For callers that run backward themselves (a pipeline executor): set_sync before it, and
  // finish() after each backward pass. Collective over dp.
  void set_sync(bool sync);
  void finish();

  // The global gradient norm (grad_norm.h) of the reduced gradients. Collective.
  GradNorm grad_norm();
  // Norm, clip, AdamW on this rank's region, and the stage's all-gather. Gradients are
  // multiplied by grad_scale first (1 / loss scale); a non-finite norm skips the update.
  // Collective over every group the norm uses.
  StepResult step(double grad_scale = 1.0);
  void zero_grad();

  // The full optimizer state in nn::AdamW's checkpoint format, whatever the stage, and its
  // restore (zero_adamw.h). Collective over dp.
  nn::OptimizerState optimizer_state() const { return optimizer_->gather_state(*dp_); }
  void load_optimizer_state(const nn::OptimizerState& state) { optimizer_->load_state(state); }
  // Only its scalars, their groups listing this rank's parameters (ZeroAdamW::load_scalars).
  void load_optimizer_scalars(const nlohmann::json& scalars) { optimizer_->load_scalars(scalars); }

  void set_lr(double lr) { optimizer_->set_lr(lr); }
  // After this rank's own moments and master were copied back in place (a node-local
  // checkpoint of the same layout): the optimizer's update count and learning rate.
  void restore_optimizer_counters(int64_t step, double lr) {
    optimizer_->set_step_count(step);
    optimizer_->set_lr(lr);
  }
  double lr() const { return optimizer_->lr(); }
  int64_t step_count() const { return optimizer_->step_count(); }

  // ZeRO-3: gathers every parameter (to read, evaluate, save or load it) until
  // release_parameters(), which keeps values loaded meanwhile. No-ops below ZeRO-3 (the
  // parameters are always whole there). Collective.
  void gather_parameters();
  void release_parameters();
  // The same for the sharded compute copy (DataParallelConfig::compute), to read it outside the
  // units; release drops it (the copy is derived: sync_compute_shards rewrites it). No-ops
  // without one. Collective.
  void gather_compute_parameters();
  void release_compute_parameters();

  // Offloaded: fills `compute` (the layout's parameters by name, in compute_dtype, on the
  // device) from this rank's rounded master shards, one bucket at a time: each goes up from
  // the host and is all-gathered over dp. Collective over dp.
  void gather_rounded(const nn::StateDict& compute);
  bool offloaded() const { return config_.offload_optimizer; }
  int zero_stage() const { return config_.zero_stage; }
  const FlatLayout& layout() const { return *layout_; }
  const FlatParams& flat_params() const { return *params_; }
  const GradReducer& reducer() const { return *reducer_; }
  const ZeroAdamW& optimizer() const { return *optimizer_; }
  MemoryStats memory() const;
  ReduceStats reduce_stats() const { return reducer_->stats(); }
  int64_t gathers() const { return hooks_ ? hooks_->gathers() : 0; }
  // ZeRO-3: buckets gathered ahead, and those a unit then used (zero3_hooks.h).
  int64_t prefetches() const { return hooks_ ? hooks_->prefetches() : 0; }
  int64_t prefetch_hits() const { return hooks_ ? hooks_->prefetch_hits() : 0; }

 private:
  std::vector<Tensor> norm_pieces() const;

  DataParallelConfig config_;
  Communicator* dp_;
  std::unique_ptr<FlatLayout> layout_;
  std::unique_ptr<HostTransfers> host_;  // offloaded only
  std::unique_ptr<FlatParams> params_;
  std::unique_ptr<GradReducer> reducer_;
  std::unique_ptr<ZeroAdamW> optimizer_;
  std::shared_ptr<Zero3Hooks> hooks_;
  // The sharded compute copy (DataParallelConfig::compute): its layout, which matches the
  // master's bucket for bucket, its flat storage, and the hooks its model calls.
  std::unique_ptr<FlatLayout> compute_layout_;
  std::unique_ptr<FlatParams> compute_params_;
  std::shared_ptr<Zero3Hooks> compute_hooks_;
  std::vector<char> counted_;  // per parameter: counts in the global norm on this rank
  bool all_gathered_ = false;  // offloaded: gather_parameters holds every bucket
};

}  // namespace tessera::parallel
