#pragma once
// What a parallel training run is: the mesh (dp x pp x tp), ZeRO stage, pipeline schedule,
// sequence parallelism, the global batch, and the optimizer settings; and the one-line check
// that a layout fits the model, the batch and the ranks before anything is built.
//
// Every rank validates the same config against the same world size, so a layout that does not
// fit fails on every rank at once, before any collective (no rank is left waiting).

#include <cstdint>
#include <string>

#include "tessera/nn/gpt_config.h"
#include "tessera/nn/init.h"
#include "tessera/nn/lr_schedule.h"
#include "tessera/nn/optim/adamw.h"
#include "tessera/nn/optim/mixed_precision.h"
#include "tessera/nn/recompute.h"
#include "tessera/parallel/data/grad_compression.h"
#include "tessera/parallel/mesh.h"
#include "tessera/parallel/pipeline/schedule.h"

namespace tessera::parallel {

struct ParallelConfig {
  MeshShape mesh;                                     // dp, pp, tp
  int zero_stage = 0;                                 // 0..3, over the dp group
  int microbatches = 1;                               // M: per dp rank and step
  ScheduleKind schedule = ScheduleKind::one_f_one_b;  // gpipe | 1f1b | interleaved
  int virtual_stages = 1;                             // V: model chunks per pipeline rank
  bool sequence_parallel = false;                     // under tp > 1
  nn::Recompute recompute;                            // what blocks keep for backward
  // DP gradient buckets of this many MiB (ZeRO 0-2); 0: one bucket per unit (block,
  // embedding, head), the layout every ZeRO stage shares.
  double bucket_mb = 0;
  // What the dp reduction sends: none, bf16 or PowerSGD (grad_compression.h); dp > 1 only.
  GradCompression grad_compression;
  // ZeRO-3: all-gather the next unit while the current one computes (on by default).
  bool zero3_prefetch = true;
  // ZeRO-Offload: the fp32 master, AdamW's moments and the update in host memory, the reduced
  // gradients streamed down and the bf16/fp16 parameters up each step (data_parallel.h). On a
  // CUDA device, under bf16 or fp16, at ZeRO 1-3 (or one GPU: dp 1, where ZeRO 0 and 1 are
  // the same layout and it runs as ZeRO 1).
  bool offload_optimizer = false;
  // DP reductions start from the backward hooks as buckets fill (on by default); off: after
  // backward, for measuring what overlap hides (bench_overlap).
  bool overlap = true;
  int64_t batch_size = 8;                             // B: global sequences per step
  int64_t seq_len = 8;                                // T
  nn::AdamWOptions adamw;                             // adamw.lr is replaced by lr_schedule
  nn::LRSchedule lr_schedule{.kind = nn::ScheduleKind::constant, .max_lr = 1e-3};
  double max_grad_norm = 1.0;   // global-norm clipping; <= 0: off
  int64_t ignore_index = -100;  // targets to skip in the loss
  // bf16/fp16: compute chunks in that dtype over fp32 master weights (parallel_precision.h).
  nn::Precision precision = nn::Precision::fp32;
  nn::LossScalerOptions loss_scaler;  // fp16 only
  // Where this rank's chunks, buffers and activations live: the CPU, or its CUDA device
  // (whose collectives then need a communicator that carries device tensors).
  Device device = Device::cpu();
  // The masters' weights: drawn from the model's init (nn/init.h), or zeros when a load fills
  // them next (a resume, --init-from), where every draw would be start-up time thrown away.
  // The compute copies (bf16/fp16) are never drawn: they are rounded from the masters.
  nn::ParamInit init = nn::ParamInit::drawn;

  // "dp2 x pp2 x tp2, ZeRO-1, 1f1b v1 m4, sequence parallel, batch 8 x 8" (", bf16" appended
  // unless fp32, the compression, overlap and prefetch unless default, ", on cuda:0" unless on
  // the CPU)
  std::string describe() const;
};

// Why `config` cannot train `model` on `world_size` ranks, as one line, or "" when it can.
// Checks, in order: the mesh against the ranks, the ZeRO stage, the schedule, heads, kv heads
// and MLP width against tp, layers against pp * V, the batch against dp * M, the sequence
// against block_size and (with sequence parallelism) tp, and the optimizer settings.
std::string layout_error(const ParallelConfig& config, const nn::GPTConfig& model, int world_size);

}  // namespace tessera::parallel
