// Optimizer offload (ParallelConfig::offload_optimizer, ZeRO-Offload) on CUDA ranks over the
// NCCL communicator: where the build's NCCL is simulated (CI) each rank runs the simulated
// device with deferred streams, so a gradient download issued before the reduction that fills
// it reads the wrong bytes and shows as a different number; on real NCCL the same cases run on
// GPUs in the device check.
//
// What must hold:
//  - Offloading moves the update, never changes it: the CPU AdamW and the CUDA one give the
//    same bits (tests/cuda/adamw_kernels_test.cpp), the gradients are the device's, and the
//    rounding is to nearest even on both. So every loss, gradient norm and gathered master
//    weight equals the on-device run's bit for bit, at ZeRO 1, 2 and 3, bf16 and fp16.
//  - The optimizer state left the device: the device allocator's live bytes after building the
//    trainer drop by exactly the fp32 master the device no longer holds (the whole model at
//    ZeRO 1/2, its shard at ZeRO-3) plus the two AdamW moments of this rank's shard, and the
//    host holds the master shard, the moments, the gradient downloads and the rounded copy.
//  - A checkpoint saved from an offloaded run and loaded into a fresh one resumes it exactly:
//    the loaded master reaches the compute copy (the host rounds it again).
//  - The gradients start down during backward, not after it: every bucket's download is on its
//    way before the optimizer step, and where a bucket's reduce-scatter writes its shard on
//    the communication stream (no accumulation into it), the download is queued right behind
//    it from the gradient hook. Under deferred streams a download ordered wrongly against the
//    reduction or the accumulation reads stale bytes and the numbers above differ.

#include <gtest/gtest.h>

#if defined(TESSERA_HAS_NCCL)

#include <string>
#include <vector>

#include "nn/tiny_models.h"
#include "parallel/layout_test_util.h"
#include "parallel/nccl_test_device.h"
#include "tessera/core/allocator.h"
#include "tessera/cuda/cuda.h"
#if defined(TESSERA_NCCL_SIMULATED)
#include "tessera/cuda/sim/streams.h"
#endif
#include "tessera/parallel/comm/detail/nccl_communicator.h"
#include "tessera/parallel/comm/mpi_communicator.h"

namespace tessera::parallel {
namespace {

using testing::LayoutCase;
using testing::LayoutRun;

constexpr int64_t kSteps = 3;

struct OffloadRun {
  LayoutRun run;
  int64_t device_bytes = 0;  // device allocator's live bytes the trainer added at construction
  RankMemory memory;         // the last step's
  int64_t space_numel = 0, shard_numel = 0;  // the dp layout's (one f32 space)
  // The last step's: buckets, their downloads started before the optimizer step, and the
  // reductions launched (and shards announced ready) from backward's gradient hooks.
  int64_t buckets = 0, early_downloads = 0, launched_in_backward = 0, ready_in_backward = 0;
};

std::shared_ptr<Communicator> nccl_world() {
  return NcclCommunicator::create(MPI_COMM_WORLD, "world");
}

ParallelConfig on_device(ParallelConfig p, bool offload) {
  p.device = Device::cuda();
  p.offload_optimizer = offload;
  return p;
}

void train(ParallelTrainer& trainer, const ParallelConfig& p, const nn::GPTConfig& model,
           int64_t first, int64_t last, OffloadRun& out) {
  for (int64_t step = first; step < last; ++step) {
    trainer.set_step(step);
    testing::Batch b = testing::global_batch(step, p.batch_size, p.seq_len, model.vocab_size);
    ParallelStepStats s = trainer.step(b.inputs, b.targets);
    out.run.losses.push_back(s.loss);
    out.run.norms.push_back(s.grad_norm);
    out.memory = s.memory;
  }
}

OffloadRun run(const nn::GPTConfig& model, const ParallelConfig& p, bool offload) {
#if defined(TESSERA_NCCL_SIMULATED)
  cuda::sim::ScopedStreamMode deferred(cuda::sim::StreamMode::deferred);
#endif
  Allocator& device = allocator_for(Device::cuda());
  backend_for(Device::cuda()).synchronize();
  const int64_t before = device.stats().live_bytes;
  ParallelTrainer trainer(nccl_world(), model, on_device(p, offload));
  backend_for(Device::cuda()).synchronize();
  OffloadRun out;
  out.device_bytes = device.stats().live_bytes - before;
  const FlatLayout& layout = trainer.data_parallel().layout();
  EXPECT_EQ(layout.spaces().size(), 1u);
  out.space_numel = layout.spaces()[0].numel;
  out.shard_numel = layout.spaces()[0].shard_numel;
  train(trainer, p, model, 0, kSteps - 1, out);
  const ReduceStats first = trainer.data_parallel().reduce_stats();
  train(trainer, p, model, kSteps - 1, kSteps, out);
  const ReduceStats last = trainer.data_parallel().reduce_stats();
  out.buckets = int64_t(layout.buckets().size());
  out.early_downloads = trainer.data_parallel().optimizer().early_downloads();
  out.launched_in_backward = last.launched_in_backward - first.launched_in_backward;
  out.ready_in_backward = last.ready_in_backward - first.ready_in_backward;
  out.run.weights = trainer.gather_full_state();
  return out;
}

// Offloaded against on the device, same layout: identical numbers, and the bytes that moved.
void expect_offload_exact(const LayoutCase& c, nn::Precision precision) {
  const std::string unavailable = testing::open_nccl_device();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  nn::testing::OneThread one_thread;
  ParallelConfig p = testing::case_config(c);
  p.precision = precision;
  const nn::GPTConfig model = testing::case_model(c);
  const std::string what = p.describe();
  const OffloadRun ref = run(model, p, false);
  const OffloadRun got = run(model, p, true);
  testing::expect_identical(got.run, ref.run, what + ", offloaded against on the device");

  // The device no longer holds the fp32 master (ZeRO 1/2: the whole flat buffer; ZeRO-3: the
  // shard) nor exp_avg and exp_avg_sq of the shard; everything else it allocates is the same.
  const int64_t master = 4 * (c.zero == 3 ? got.shard_numel : got.space_numel);
  const int64_t moments = 2 * 4 * got.shard_numel;
  EXPECT_EQ(ref.device_bytes - got.device_bytes, master + moments)
      << what << ": device bytes " << ref.device_bytes << " on the device, " << got.device_bytes
      << " offloaded";
  EXPECT_EQ(got.memory.optimizer_state, 0) << what;
  EXPECT_EQ(ref.memory.optimizer_state, moments) << what;
  // Host: master shard and moments (f32), the gradient downloads (f32), the rounded copy.
  EXPECT_EQ(got.memory.offloaded, (4 + 8 + 4 + 2) * got.shard_numel) << what;
  EXPECT_EQ(ref.memory.offloaded, 0) << what;

  // Every bucket was on its way down before the step; at ZeRO 1 (reduced once, on the last
  // micro-batch, straight into the shard) each one launched from a hook was queued behind its
  // reduce-scatter there. ZeRO 2/3 with two micro-batches add the last one's reduction into
  // the shard on the compute stream, so theirs start when the reducer sees it complete.
  EXPECT_GT(got.buckets, 1) << what;
  EXPECT_EQ(got.early_downloads, got.buckets) << what;
  EXPECT_EQ(ref.early_downloads, 0) << what;
  if (c.zero == 1) {
    EXPECT_GT(got.launched_in_backward, 0) << what;
    EXPECT_EQ(got.ready_in_backward, got.launched_in_backward) << what;
  }
  if (MpiCommunicator::world()->rank() == 0)
    std::printf(
        "  %-60s device -%lld B, host %lld B; %lld of %lld downloads queued from "
        "backward's hooks\n",
        what.c_str(), (long long)(ref.device_bytes - got.device_bytes),
        (long long)got.memory.offloaded, (long long)got.ready_in_backward, (long long)got.buckets);
}

constexpr auto k1F1B = ScheduleKind::one_f_one_b;

TEST(OffloadN1, OneGpuZero1Bf16) {
  expect_offload_exact({{1, 1, 1}, 1, k1F1B, 1, 2, false, true}, nn::Precision::bf16);
}

TEST(OffloadN2, DataParallelZero1To3) {
  expect_offload_exact({{2, 1, 1}, 1, k1F1B, 1, 1}, nn::Precision::bf16);
  expect_offload_exact({{2, 1, 1}, 2, k1F1B, 1, 2, false, true}, nn::Precision::fp16);
  expect_offload_exact({{2, 1, 1}, 3, k1F1B, 1, 2, false, true}, nn::Precision::bf16);
}

// Two steps, a checkpoint (master and optimizer state, single-process format), a fresh
// offloaded trainer that loads it, one more step: the same as three uninterrupted steps.
TEST(OffloadN2, CheckpointResumesExactly) {
  const std::string unavailable = testing::open_nccl_device();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  nn::testing::OneThread one_thread;
  const LayoutCase c{{2, 1, 1}, 2, k1F1B, 1, 1};
  ParallelConfig p = testing::case_config(c);
  p.precision = nn::Precision::bf16;
  const nn::GPTConfig model = testing::case_model(c);
#if defined(TESSERA_NCCL_SIMULATED)
  cuda::sim::ScopedStreamMode deferred(cuda::sim::StreamMode::deferred);
#endif
  OffloadRun whole, resumed;
  {
    ParallelTrainer t(nccl_world(), model, on_device(p, true));
    train(t, p, model, 0, kSteps, whole);
    whole.run.weights = t.gather_full_state();
  }
  nn::StateDict weights;
  nn::OptimizerState optimizer;
  {
    ParallelTrainer t(nccl_world(), model, on_device(p, true));
    train(t, p, model, 0, kSteps - 1, resumed);
    weights = t.gather_full_state();
    optimizer = t.gather_full_optimizer_state();
  }
  ParallelTrainer t(nccl_world(), model, on_device(p, true));
  t.load_full_state(weights);
  t.load_full_optimizer_state(optimizer);
  train(t, p, model, kSteps - 1, kSteps, resumed);
  resumed.run.weights = t.gather_full_state();
  testing::expect_identical(resumed.run, whole.run, p.describe() + ", offloaded, resumed");
}

}  // namespace
}  // namespace tessera::parallel

#endif  // TESSERA_HAS_NCCL
