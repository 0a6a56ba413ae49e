#pragma once
// ParallelPrecision: nn::MixedPrecision's policy (fp32, bf16, fp16 with a dynamic loss scale)
// for a model split over a parallel layout, with the same numerics as one process.
//
// DataParallel's fp32 flat buffers are the master weights, and ZeroAdamW's fp32 state is the
// optimizer's, at every ZeRO stage: nothing in data/ knows about precision. Under bf16 or fp16
// the pipeline runs compute chunks, the same chunks built in the compute dtype, whose
// parameters are round(master) as in one process:
//
//  - Gradients: a post-accumulate hook on each compute parameter casts its gradient to fp32,
//    drops it, and accumulates it into the master through the master's own AccumulateGrad node.
//    That runs the master's hooks exactly as a backward pass would, so DataParallel buckets,
//    reduces (ZeRO 0/1: in place in the fp32 flat buffer; ZeRO 2/3: via staging) and
//    accumulates micro-batches in fp32 without knowing the gradient came from another tensor.
//  - Step: the global fp32 norm over dp, tp and pp is the overflow check, as in one process:
//    fp16 unscales the norm (bit for bit as one process does, for power-of-two scales); a
//    non-finite norm skips the update on every rank at once (the norm is summed over every
//    group, so an inf on one rank reaches all), and the scaler, updated from that same number
//    everywhere, backs off alike on every rank. Unscaling and clipping ride in the update's
//    grad_scale.
//  - After an update the master weights are rounded into the compute parameters.
//
// With the optimizer offloaded (DataParallel's offload_optimizer), the master shards live in host
// memory and the host's AdamW rounds them as it updates; sync_compute all-gathers those 16-bit
// shards into the compute parameters (at ZeRO-3 copies each into its compute shard), so no fp32
// copy of the model is on the device.
//
// Below ZeRO-3 the compute chunks hold their whole parameters in the compute dtype (half the
// bytes of the fp32 model). At ZeRO-3 DataParallel shards them like the master
// (DataParallelConfig::compute): each unit is all-gathered in the compute dtype just before it
// runs (half the bytes of gathering the fp32 master) and freed after, and sync_compute rounds
// each rank's master shard into its compute shard locally, which gives the bits of rounding the
// gathered master, since rounding is elementwise.

#include <cstdint>

#include <nlohmann/json.hpp>

#include "tessera/nn/module.h"
#include "tessera/nn/optim/loss_scaler.h"
#include "tessera/nn/optim/mixed_precision.h"
#include "tessera/parallel/data/data_parallel.h"

namespace tessera::parallel {

struct PrecisionStepResult {
  StepResult update;      // DataParallel's: the unscaled norm, the clip factor, finite
  bool skipped = false;   // fp16 overflow: nothing was updated, the scale backed off
  double loss_scale = 1;  // the scale this step's backward ran with
};

class ParallelPrecision {
 public:
  // master: the fp32 parameters `dp` holds; compute: the same names and shapes in
  // compute_dtype(precision), or (fp32) the master tensors themselves. Rounds the master into
  // the compute parameters. Collective over dp at ZeRO-3 (it gathers).
  ParallelPrecision(nn::Precision precision, const nn::StateDict& master,
                    const nn::StateDict& compute, DataParallel& dp,
                    const nn::LossScalerOptions& scaler = {});

  nn::Precision precision() const { return precision_; }
  // This rank's master parameters (DataParallel's; at ZeRO-3 readable only while gathered) and
  // the compute parameters the pipeline runs, pairwise by name.
  const nn::StateDict& master() const { return master_; }
  const nn::StateDict& compute() const { return compute_; }
  // The scale the next backward pass multiplies the loss by (1 unless fp16).
  double loss_scale() const;
  // fp16 only; nullptr otherwise.
  const nn::DynamicLossScaler* scaler() const;

  // DataParallel::step with the gradients unscaled; fp16 updates the scaler and skips on
  // overflow; then rounds the updated master into the compute parameters. Collective.
  PrecisionStepResult step();
  // Rounds the master weights into the compute parameters (after loading the master).
  // Collective over dp at ZeRO-3.
  void sync_compute();

  // Bytes of the compute parameters this rank holds (0 under fp32: they are the master; at
  // ZeRO-3 the shard), and the most it held while units were gathered.
  int64_t compute_bytes() const;
  int64_t compute_peak_bytes() const;

  // nn::MixedPrecision::state()'s format, so single-process and parallel checkpoints resume
  // each other: {"precision": ..., "loss_scaler": ... (fp16)}.
  nlohmann::json state() const;
  // As nn::MixedPrecision::load_state: the scaler is restored when both policies are fp16.
  void load_state(const nlohmann::json& j);

 private:
  nn::Precision precision_;
  nn::StateDict master_, compute_;
  DataParallel* dp_;
  nn::DynamicLossScaler scaler_;
};

}  // namespace tessera::parallel
