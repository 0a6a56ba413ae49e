// tessera plan's model states against the engine's own: under every CPU layout below, each
// rank's parameter, gradient and optimizer bytes (DataParallel::memory() plus the compute copy,
// as ParallelTrainer reports them after a step) equal plan::model_state_bytes for that rank's
// pipeline stage, to the byte. The planner's arithmetic (unit buckets padded to dp x 16
// elements, a tied embedding's own bucket, the ZeRO table, the compute copy) is then the
// engine's, and what it predicts for a 1,000-GPU layout is the same sum at another size.

#include <gtest/gtest.h>

#include "nn/tiny_models.h"
#include "parallel/layout_test_util.h"
#include "tessera/plan/memory_model.h"

namespace tessera::parallel {
namespace {

struct StatesCase {
  MeshShape mesh;
  int zero = 0;
  int v = 1, m = 2;
  bool gpt2 = true;
  nn::Precision precision = nn::Precision::fp32;
  bool sp = false;
};

void expect_states_match(const StatesCase& c) {
  nn::testing::OneThread one_thread;
  ParallelConfig p = testing::layout_config(c.mesh);
  p.zero_stage = c.zero;
  p.virtual_stages = c.v;
  p.schedule = c.v > 1 ? ScheduleKind::interleaved : ScheduleKind::one_f_one_b;
  p.microbatches = c.m;
  p.precision = c.precision;
  p.sequence_parallel = c.sp;
  const nn::GPTConfig model = c.gpt2 ? testing::layout_gpt2() : testing::layout_llama();
  ParallelTrainer trainer(testing::test_world(), model, p);
  const testing::Batch b = testing::global_batch(0, p.batch_size, p.seq_len, model.vocab_size);
  const ParallelStepStats s = trainer.step(b.inputs, b.targets);

  plan::Layout l;
  l.dp = c.mesh.size("dp"), l.tp = c.mesh.size("tp"), l.pp = c.mesh.size("pp");
  l.virtual_stages = c.v, l.microbatches = c.m, l.zero = c.zero, l.sequence_parallel = c.sp;
  const plan::ModelStates want =
      plan::model_state_bytes(model, l, c.precision, trainer.mesh().pp_rank());
  const std::string what = str_cat(trainer.config().describe(), c.gpt2 ? ", GPT-2" : ", Llama",
                                   ", pp rank ", trainer.mesh().pp_rank());
  EXPECT_EQ(s.memory.parameters, want.parameters) << what;
  EXPECT_EQ(s.memory.gradients, want.gradients) << what;
  EXPECT_EQ(s.memory.optimizer_state, want.optimizer) << what;
}

RANK_TEST(PlanMemoryN4, ModelStatesOfDataParallelStages) {
  for (bool gpt2 : {true, false})
    for (int zero = 0; zero <= 3; ++zero)
      for (nn::Precision precision : {nn::Precision::fp32, nn::Precision::bf16})
        expect_states_match({MeshShape(4, 1, 1), zero, 1, 2, gpt2, precision});
}

RANK_TEST(PlanMemoryN4, ModelStatesOfTensorAndPipelineLayouts) {
  using P = nn::Precision;
  const StatesCase cases[] = {
      {MeshShape(2, 1, 2), 1, 1, 2, true, P::fp32},        // tp2: vocab rows, split and replicated
      {MeshShape(2, 1, 2), 3, 1, 2, false, P::bf16},       // tp2, GQA, SwiGLU, sharded compute copy
      {MeshShape(1, 1, 4), 0, 1, 1, true, P::fp32, true},  // tp4 with sequence parallelism
      {MeshShape(2, 2, 1), 0, 1, 2, true, P::fp32},        // pp2 1F1B: the tied copy's own bucket
      {MeshShape(2, 2, 1), 2, 1, 2, true, P::bf16},
      {MeshShape(2, 2, 1), 3, 1, 2, false, P::bf16},
      {MeshShape(1, 2, 2), 0, 2, 2, true, P::fp32},   // pp2 x tp2, interleaved v2
      {MeshShape(2, 2, 1), 1, 2, 2, false, P::fp32},  // dp2 x pp2, interleaved v2
      {MeshShape(1, 4, 1), 0, 1, 4, true, P::bf16},   // pp4: head and embedding apart
  };
  for (const StatesCase& c : cases) expect_states_match(c);
}

}  // namespace
}  // namespace tessera::parallel
