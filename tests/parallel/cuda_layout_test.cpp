// The layout-equivalence suite on CUDA ranks over the NCCL communicator. Where the build's
// NCCL is simulated (CI): each rank registers the simulated device, the world is the NCCL
// communicator over the simulated NCCL (tessera/nccl_sim), and streams run deferred (work runs
// only when something needs it, the communication stream as late as possible), so a missing
// event between the compute and the communication streams shows as a wrong number. Where it
// is real NCCL, the same cases run on GPUs (one per rank) in the device check: CudaLayoutN1 on
// one GPU (the engine's steps through a one-rank NCCL communicator), the others on 2-8. Each layout
// trains a few steps of a tiny GPT on Device::cuda() and is compared with one CPU process on the
// same global batches: per-step losses and the gathered master weights, in fp32 and bf16
// (every case), and fp16 with its loss scaler (dp2, tp2 and pp2).
//
// Tolerances are the CPU suites' (layout_equivalence_test.cpp, layout_precision_test.cpp),
// over fewer steps. fp32: 1e-5 relative; the CUDA kernels regroup sums as the layouts do
// (blocked reductions, tiled matmuls), about 1e-7 relative per op, and three steps add three
// such errors. bf16: kLossTol = u/8 per step and 0.02 on the whole model's master weights,
// derived there from bf16's unit roundoff u = 2^-9. fp16 is held to the same bounds: its unit
// roundoff 2^-11 is a quarter of bf16's, and at these small activations nothing overflows.
//
// Three steps: the first checks forward and backward from equal weights, the next two that the
// optimizer's sharded state (ZeRO) carries between steps. The simulator runs every kernel on
// the CPU, thread by thread: one step of these layouts costs about a second per rank.

#include <gtest/gtest.h>

#if defined(TESSERA_HAS_NCCL)

#include <algorithm>
#include <cstdio>

#include "nn/tiny_models.h"
#include "parallel/layout_test_util.h"
#include "parallel/nccl_test_device.h"
#include "tessera/cuda/cuda.h"
#if defined(TESSERA_NCCL_SIMULATED)
#include "tessera/cuda/sim/streams.h"
#endif
#include "tessera/parallel/comm/mpi_communicator.h"
#include "tessera/parallel/comm/detail/nccl_communicator.h"

namespace tessera::parallel {
namespace {

using testing::LayoutCase;
using testing::LayoutRun;

constexpr int64_t kSteps = 3;
constexpr double kFp32Tol = 1e-5;               // see the file comment
constexpr double kBf16LossTol = 1.0 / 512 / 8;  // u / 8
constexpr double kBf16WeightTol = 0.02;

#if defined(TESSERA_NCCL_SIMULATED)
constexpr const char* kDevice = "simulated cuda";
#else
constexpr const char* kDevice = "cuda";
#endif

LayoutRun run_on_cuda_ranks(const nn::GPTConfig& model, const ParallelConfig& p) {
#if defined(TESSERA_NCCL_SIMULATED)
  cuda::sim::ScopedStreamMode deferred(cuda::sim::StreamMode::deferred);
#endif
  ParallelConfig on_device = p;
  on_device.device = Device::cuda();
  ParallelTrainer trainer(NcclCommunicator::create(MPI_COMM_WORLD, "world"), model, on_device);
  LayoutRun r;
  for (int64_t step = 0; step < kSteps; ++step) {
    testing::Batch b = testing::global_batch(step, p.batch_size, p.seq_len, model.vocab_size);
    ParallelStepStats s = trainer.step(b.inputs, b.targets);
    r.losses.push_back(s.loss);
    r.norms.push_back(s.grad_norm);
  }
  r.weights = trainer.gather_full_state();
  return r;
}

// Whole-model ||W - W_ref|| / ||W_ref||.
double model_error(const nn::StateDict& got, const nn::StateDict& ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const std::vector<double> a =
        to_vector<double>(ops::cast(ops::to(got[i].second, Device::cpu()), DType::f64));
    const std::vector<double> b =
        to_vector<double>(ops::cast(ops::to(ref[i].second, Device::cpu()), DType::f64));
    for (size_t k = 0; k < a.size(); ++k) {
      diff += (a[k] - b[k]) * (a[k] - b[k]);
      norm += b[k] * b[k];
    }
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

void expect_matches_cpu(const LayoutCase& c, nn::Precision precision) {
  const std::string unavailable = testing::open_nccl_device();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  nn::testing::OneThread one_thread;
  ParallelConfig p = testing::case_config(c);
  p.precision = precision;
  const nn::GPTConfig model = testing::case_model(c);
  const bool bf16 = precision != nn::Precision::fp32;  // a 16-bit run: bf16 or fp16
  const std::string what =
      str_cat(c.gpt2 ? "gpt2 " : "llama ", p.describe(), bf16 ? "" : ", fp32", " on ", kDevice);
  const LayoutRun ref =
      bf16 ? testing::run_single(model, p, kSteps) : testing::run_reference(model, p, kSteps);
  const LayoutRun got = run_on_cuda_ranks(model, p);
  ASSERT_EQ(got.losses.size(), ref.losses.size()) << what;
  double worst_loss = 0;
  for (size_t i = 0; i < got.losses.size(); ++i)
    worst_loss = std::max(worst_loss, std::abs(got.losses[i] - ref.losses[i]) / ref.losses[i]);
  ASSERT_EQ(got.weights.size(), ref.weights.size()) << what;
  double worst_weight = 0;
  for (size_t i = 0; i < got.weights.size(); ++i) {
    ASSERT_EQ(got.weights[i].first, ref.weights[i].first) << what;
    if (!bf16 && got.weights[i].first.find("attn.c_attn.bias") != std::string::npos)
      continue;  // the key bias holds rounding noise only (layout_equivalence_test.cpp)
    const double e = testing::relative_error(got.weights[i].second, ref.weights[i].second);
    if (!bf16) {
      EXPECT_LE(e, kFp32Tol) << what << " " << got.weights[i].first;
    }
    worst_weight = std::max(worst_weight, e);
  }
  if (bf16) {
    worst_weight = model_error(got.weights, ref.weights);
    EXPECT_LE(worst_loss, kBf16LossTol) << what << ": per-step losses";
    EXPECT_LE(worst_weight, kBf16WeightTol) << what << ": master weights";
  } else {
    EXPECT_LE(worst_loss, kFp32Tol) << what << ": per-step losses";
  }
  if (MpiCommunicator::world()->rank() == 0)
    std::printf("  %-64s loss %.1e  weights %.1e\n", what.c_str(), worst_loss, worst_weight);
}

constexpr auto k1F1B = ScheduleKind::one_f_one_b;
constexpr auto kInterleaved = ScheduleKind::interleaved;

// One rank: the engine's steps on Device::cuda() through a one-rank NCCL communicator (ZeRO 1
// keeps the optimizer's reduce-scatter and all-gather, which reach NCCL even in a group of one).
TEST(CudaLayoutN1, OneRankThroughNccl) {
  expect_matches_cpu({{1, 1, 1}, 1, k1F1B, 1, 2, false, true}, nn::Precision::bf16);
}

TEST(CudaLayoutN2, DataParallelZero0And3) {
  for (nn::Precision precision : {nn::Precision::fp32, nn::Precision::bf16, nn::Precision::fp16}) {
    expect_matches_cpu({{2, 1, 1}, 0, k1F1B, 1, 1}, precision);
    expect_matches_cpu({{2, 1, 1}, 3, k1F1B, 1, 2, false, true}, precision);
  }
}

TEST(CudaLayoutN2, TensorParallelSequenceParallel) {
  for (nn::Precision precision : {nn::Precision::fp32, nn::Precision::bf16, nn::Precision::fp16})
    expect_matches_cpu({{1, 1, 2}, 0, k1F1B, 1, 2, true}, precision);
}

TEST(CudaLayoutN2, Pipeline1F1BAndInterleaved) {
  for (nn::Precision precision : {nn::Precision::fp32, nn::Precision::bf16}) {
    expect_matches_cpu({{1, 2, 1}, 0, k1F1B, 1, 2, false, true}, precision);
    expect_matches_cpu({{1, 2, 1}, 0, kInterleaved, 2, 4}, precision);
  }
  expect_matches_cpu({{1, 2, 1}, 0, k1F1B, 1, 2, false, true}, nn::Precision::fp16);
}

TEST(CudaLayoutN4, TensorAndPipelineParallel) {
  for (nn::Precision precision : {nn::Precision::fp32, nn::Precision::bf16})
    expect_matches_cpu({{1, 2, 2}, 0, kInterleaved, 2, 2, true}, precision);
}

TEST(CudaLayoutN8, DataTensorPipelineZero1And2) {
  for (nn::Precision precision : {nn::Precision::fp32, nn::Precision::bf16}) {
    expect_matches_cpu({{2, 2, 2}, 1, k1F1B, 1, 2, true}, precision);
    expect_matches_cpu({{2, 2, 2}, 2, kInterleaved, 2, 2, false, true}, precision);
  }
}

}  // namespace
}  // namespace tessera::parallel

#endif  // TESSERA_HAS_NCCL
