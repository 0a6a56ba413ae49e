// `tessera train --device cuda` end to end on the simulated CUDA device: the same tiny run on
// cuda:0 and on the CPU produces the same losses (up to summation order), and the cuda run's
// checkpoint loads on the host and resumes.

#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

#include "tessera/cuda/cuda.h"
#include "tessera/train/trainer.h"
#include "tools/tools_test_util.h"

namespace tessera::cli::testing {
namespace {

std::vector<nlohmann::json> read_metrics(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Every simulated GPU thread is a fiber, so the model is as small as the trainer allows: one
// layer at width 16 over the byte tokenizer's 257 ids, 2 x 8 tokens a step, no dropout (the
// CPU and CUDA dropout masks are not the same stream), three steps.
TrainOptions tiny_run(const ScratchDir& dir, const std::string& run, const std::string& device,
                      const std::string& precision) {
  TrainOptions o = tiny_options(dir, run);
  o.model_overrides = {{"n_layer", 1}, {"n_head", 2},     {"n_kv_head", 2},
                       {"n_embd", 16}, {"block_size", 8}, {"dropout", 0.0}};
  drop_validation(o);
  o.batch_size = 2;
  o.seq_len = 8;
  o.grad_accum = 1;
  o.max_steps = 3;
  o.warmup_steps = 0;
  o.checkpoint_every = 0;
  o.device = device;
  o.precision = precision;
  return o;
}

struct Runs {
  std::vector<nlohmann::json> cpu, cuda;
  std::string cuda_checkpoint;
  std::string cuda_output;
};

Runs train_on_both(const ScratchDir& dir, const std::string& precision) {
  cuda::use_simulated_device();
  std::ostringstream quiet, cuda_out;
  TrainOptions on_cpu = tiny_run(dir, "cpu_" + precision, "cpu", precision);
  Trainer(on_cpu).fit(&quiet);
  TrainOptions on_cuda = tiny_run(dir, "cuda_" + precision, "cuda", precision);
  FitResult r = Trainer(on_cuda).fit(&cuda_out);
  return {read_metrics(on_cpu.run_dir), read_metrics(on_cuda.run_dir), r.checkpoint,
          cuda_out.str()};
}

// Both devices run the same fp32 arithmetic in different orders (blocked GEMMs, tree
// reductions in the kernels): each op differs by a few fp32 ulps (~1e-7 relative), and three
// AdamW steps at lr 3e-3 carry such differences into the weights at about lr * 1e-6. The
// losses (~5.5 nats) then agree to ~1e-5 (measured: 4.8e-7, one fp32 ulp at 5.5); the bound
// 1e-4 stays 100 times below the loss's fall over the three steps, so a missing or wrong
// update on either device fails it.
TEST(CudaTrain, Fp32LossesMatchTheCpuAndTheCheckpointLoads) {
  ScratchDir dir;
  write_corpus_shards(dir);
  Runs runs = train_on_both(dir, "fp32");
  ASSERT_EQ(runs.cpu.size(), 3u);
  ASSERT_EQ(runs.cuda.size(), 3u);
  EXPECT_NE(runs.cuda_output.find("device: cuda:0"), std::string::npos) << runs.cuda_output;
  double worst = 0;
  for (size_t i = 0; i < 3; ++i) {
    const double a = runs.cpu[i]["loss"].get<double>(), b = runs.cuda[i]["loss"].get<double>();
    EXPECT_NEAR(b, a, 1e-4) << "step " << i + 1;
    worst = std::max(worst, std::abs(b - a));
  }
  std::cout << "[ cuda train ] fp32: largest |loss(cuda) - loss(cpu)| over 3 steps: " << worst
            << "\n";
  EXPECT_LT(runs.cuda[2]["loss"].get<double>(), runs.cuda[0]["loss"].get<double>() - 0.01);

  nn::CheckpointData c = nn::load_checkpoint(runs.cuda_checkpoint);
  EXPECT_EQ(c.step, 3);
  nn::GPT model(nn::GPTConfig::from_json(c.state["model_config"]));
  model.load_state_dict(c.model);
  for (const auto& [name, t] : c.model) EXPECT_EQ(t.device(), Device::cpu()) << name;
}

// bf16 on both devices: weights and activations rounded to 8 significant bits (2^-9 relative)
// at every op, so a one-ulp fp32 difference in a sum before rounding can flip a bf16 rounding,
// a 2^-8 relative change of that value. Such flips average out over the 16-wide sums: the
// losses agree to ~1e-3 nats or better (measured: 6e-5). The bound 0.01 is the one bf16 vs fp32
// uses on the CPU (precision_train_test.cpp): a cuda run that computed in fp32, or lost its
// updates, would still be caught by the loss's fall.
TEST(CudaTrain, Bf16LossesMatchTheCpu) {
  ScratchDir dir;
  write_corpus_shards(dir);
  Runs runs = train_on_both(dir, "bf16");
  ASSERT_EQ(runs.cpu.size(), 3u);
  ASSERT_EQ(runs.cuda.size(), 3u);
  double worst = 0;
  for (size_t i = 0; i < 3; ++i) {
    const double a = runs.cpu[i]["loss"].get<double>(), b = runs.cuda[i]["loss"].get<double>();
    EXPECT_NEAR(b, a, 0.01) << "step " << i + 1;
    EXPECT_EQ(runs.cuda[i]["precision"], "bf16");
    worst = std::max(worst, std::abs(b - a));
  }
  std::cout << "[ cuda train ] bf16: largest |loss(cuda) - loss(cpu)| over 3 steps: " << worst
            << "\n";
  EXPECT_LT(runs.cuda[2]["loss"].get<double>(), runs.cuda[0]["loss"].get<double>() - 0.01);
  nn::CheckpointData c = nn::load_checkpoint(runs.cuda_checkpoint);
  for (const auto& [name, t] : c.model) {
    if (is_floating(t.dtype())) {
      EXPECT_EQ(t.dtype(), DType::f32) << name;
    }
  }
}

}  // namespace
}  // namespace tessera::cli::testing
