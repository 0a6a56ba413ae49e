// What ParallelTrainer reports per step: the loss is the same on every rank, communication
// time and the pipeline bubble are measured, and the per-rank bytes shrink with the ZeRO stage
// as data_parallel.h says.

#include <gtest/gtest.h>

#include <cstdio>

#include "nn/tiny_models.h"
#include "parallel/layout_test_util.h"
#include "tessera/parallel/comm/mpi_communicator.h"

namespace tessera::parallel {
namespace {

ParallelStepStats one_step(int zero, nn::Precision precision = nn::Precision::fp32) {
  ParallelConfig p = testing::layout_config({2, 2, 1});
  p.zero_stage = zero;
  p.precision = precision;
  p.microbatches = 2;
  ParallelTrainer trainer(MpiCommunicator::world(), testing::layout_gpt2(), p);
  testing::Batch b = testing::global_batch(0, p.batch_size, p.seq_len, 61);
  return trainer.step(b.inputs, b.targets);
}

TEST(LayoutStatsN4, StepReportsLossTimesAndBytes) {
  nn::testing::OneThread one_thread;
  std::vector<ParallelStepStats> s;
  for (int z = 0; z <= 3; ++z) s.push_back(one_step(z));
  auto world = MpiCommunicator::world();
  for (size_t z = 0; z < s.size(); ++z) {
    const ParallelStepStats& r = s[z];
    if (world->rank() == 0)
      std::printf(
          "  dp2 x pp2 ZeRO-%zu rank 0: loss %.6f, comm %.2f ms, bubble %.2f, bytes: "
          "params %lld, grads %lld, optimizer %lld, activations %lld\n",
          z, r.loss, 1e3 * r.comm_seconds, r.bubble, (long long)r.memory.parameters,
          (long long)r.memory.gradients, (long long)r.memory.optimizer_state,
          (long long)r.memory.activations);
    // Every rank reports the same global loss: max and -min over the world agree.
    Tensor v = from_vector<double>({r.loss, -r.loss}, Shape{2});
    world->all_reduce(v, CommOp::max);
    EXPECT_EQ(to_vector<double>(v)[0], -to_vector<double>(v)[1]);
    EXPECT_GT(r.comm_seconds, 0);  // dp reductions and pipeline transfers were waited for
    EXPECT_GE(r.bubble, 0);
    EXPECT_GT(r.memory.activations, 0);
    EXPECT_GT(r.memory.parameters, 0);
  }
  // dp = 2: a sharded buffer is half the full one, plus up to one 16-element alignment pad per
  // bucket (FlatLayout::kShardAlign) on each side of the halving: 2 KiB covers this model's
  // few unit buckets.
  const int64_t slack = 2048;
  EXPECT_LE(s[1].memory.optimizer_state, s[0].memory.optimizer_state / 2 + slack);
  EXPECT_LE(s[2].memory.gradients, s[0].memory.gradients / 2 + slack);
  EXPECT_LE(s[3].memory.parameters, s[0].memory.parameters / 2 + slack);
  EXPECT_EQ(s[0].memory.parameters, s[2].memory.parameters);
}

// bf16 holds an fp32 master (4 bytes per parameter) and a bf16 compute copy (2). ZeRO-3 shards
// both, so between steps a rank holds half of ZeRO-0's 6 bytes per parameter; keeping the
// compute copy whole would leave 2 + 2 = 4 of the 6, two thirds, which the first bound refuses.
// While the units run, at most the largest few units are gathered on top of the shard.
TEST(LayoutStatsN4, Bf16ZeroThreeShardsTheComputeCopy) {
  nn::testing::OneThread one_thread;
  const ParallelStepStats s0 = one_step(0, nn::Precision::bf16);
  const ParallelStepStats s3 = one_step(3, nn::Precision::bf16);
  if (MpiCommunicator::world()->rank() == 0)
    std::printf(
        "  dp2 x pp2 bf16 rank 0: params ZeRO-0 %lld, ZeRO-3 %lld (peak %lld); wire bytes "
        "ZeRO-0 %lld, ZeRO-3 %lld\n",
        (long long)s0.memory.parameters, (long long)s3.memory.parameters,
        (long long)s3.memory.parameters_peak, (long long)s0.comm_wire_bytes,
        (long long)s3.comm_wire_bytes);
  const int64_t slack = 2048;  // as above: alignment pads per bucket
  EXPECT_LE(s3.memory.parameters, s0.memory.parameters / 2 + slack);
  EXPECT_GT(s3.memory.parameters_peak, s3.memory.parameters);  // the units were gathered
  EXPECT_LT(s3.memory.parameters_peak, s0.memory.parameters);  // never the whole model
}

// The weights are built without memory and each rank fills only its part into DataParallel's
// buffers (nn::ModelParallel::defer_parameters), so building a ZeRO-3 trainer never holds more
// host memory than the built trainer keeps, beyond the tensors built as usual (norm gains,
// biases, buffers: `small`, under bf16 once more for the compute copy) and temporaries. At dp4
// the kept state is 16 bytes a parameter / 4 (fp32 master, gradient, two moments): a stage's
// weights built whole (4 bytes a parameter, bf16 6) exceed it, and the bound fails.
TEST(LayoutStatsN4, BuildingZeroThreeHoldsNoMoreThanTheBuiltTrainer) {
  nn::testing::OneThread one_thread;
  Allocator& host = allocator_for(Device::cpu());
  int64_t small = 0;
  const nn::GPT model(testing::layout_gpt2());
  for (const auto& [name, t] : model.state_dict()) {
    const Tensor p = nn::find_tensor(model.named_parameters(), name);
    if (!p.defined() || p.dim() != 2) small += int64_t(t.nbytes());
  }
  for (nn::Precision precision : {nn::Precision::fp32, nn::Precision::bf16}) {
    ParallelConfig p = testing::layout_config({4, 1, 1});
    p.zero_stage = 3;
    p.precision = precision;
    const int64_t before = host.stats().live_bytes;
    host.reset_peak();
    ParallelTrainer trainer(MpiCommunicator::world(), testing::layout_gpt2(), p);
    const int64_t peak = host.stats().peak_bytes - before;
    const int64_t kept = host.stats().live_bytes - before;
    if (MpiCommunicator::world()->rank() == 0)
      std::printf("  dp4 ZeRO-3 %s rank 0: building peaked at %lld bytes, keeps %lld\n",
                  precision == nn::Precision::fp32 ? "fp32" : "bf16", (long long)peak,
                  (long long)kept);
    EXPECT_LE(peak, kept + 2 * small + 1024) << nn::precision_name(precision);
  }
}

}  // namespace
}  // namespace tessera::parallel
