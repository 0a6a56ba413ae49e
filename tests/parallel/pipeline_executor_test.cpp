// The pipeline executor against one process. A toy model (a tied input projection E, eight
// Linear+tanh layers, the head x E^T and a mean-squared loss) is built from the same keyed
// weights on every layout; pp = 1, 2 and 4 run GPipe, 1F1B and interleaved 1F1B. Each layout
// runs twice: plain layers, whose chunk output is tanh's (saved by tanh for its backward, so
// the executor must keep it whole), and residual layers h + tanh(W h + b), whose output is an
// add that saves nothing (so the executor frees it once sent, as for the GPT's blocks).
//
// Two references, computed on every rank:
//  - gradient accumulation in one process over the same micro-batches, with the two uses of E
//    as separate copies summed at the end. The pipeline does exactly these operations in the
//    same order (a received activation is a bit copy; each parameter accumulates its
//    micro-batches in ascending order; a + b of two ranks' tied gradients is commutative), so
//    the loss and every gradient are bit-identical.
//  - the full batch in one step with one E: equal up to fp32 summation order (below).

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <thread>

#include "parallel/rank_test.h"
#include "support/error_of.h"
#include "tessera/parallel/comm/local_communicator.h"
#include "tessera/parallel/mesh.h"
#include "tessera/parallel/pipeline/executor.h"
#include "tessera/parallel/pipeline/detail/partition.h"
#include "tessera/parallel/pipeline/simulator.h"
#include "tessera/parallel/pipeline/detail/tied_gradients.h"
#include "tessera/tessera.h"

namespace tessera::parallel {
namespace {

constexpr int64_t kWidth = 16, kLayers = 8, kBatch = 16;

Tensor keyed(uint64_t key, const Shape& shape, double std) {
  Generator gen(key);
  return randn(shape, gen, DType::f32, Device::cpu(), 0.0, std);
}
Tensor leaf(Tensor t) {
  t.set_requires_grad(true);
  return t;
}
Tensor embedding_weight() {
  return keyed(7, {kWidth, kWidth}, 0.3);
}
Tensor layer_weight(int64_t l) {
  return keyed(100 + uint64_t(l), {kWidth, kWidth}, 0.4);
}
Tensor layer_bias(int64_t l) {
  return keyed(200 + uint64_t(l), {kWidth}, 0.1);
}
Tensor inputs() {
  return keyed(11, {kBatch, kWidth}, 1.0);
}
Tensor targets() {
  return keyed(12, {kBatch, kWidth}, 0.5);
}

// Layers [first, first + n) of the toy model, with E's input use and/or its head use.
struct ToyPart {
  Tensor embed_in, embed_out;  // undefined unless this part has the embedding / the head
  std::vector<Tensor> weights, biases;
  int64_t first = 0;
  bool residual = false;

  ToyPart(const nn::StageSpec& spec, bool residual_layers,
          const Tensor& shared_embedding = Tensor()) {
    first = spec.first_layer;
    residual = residual_layers;
    int64_t n = spec.num_layers < 0 ? kLayers - first : spec.num_layers;
    for (int64_t l = first; l < first + n; ++l) {
      weights.push_back(leaf(layer_weight(l)));
      biases.push_back(leaf(layer_bias(l)));
    }
    Tensor e = shared_embedding.defined() ? shared_embedding : Tensor();
    if (spec.has_embedding) embed_in = e.defined() ? e : leaf(embedding_weight());
    if (spec.has_head) embed_out = e.defined() ? e : leaf(embedding_weight());
  }

  // x: the rows of the micro-batch (on the embedding part) or the previous part's output.
  Tensor forward(const Tensor& x, const Tensor& y) const {
    Tensor h = embed_in.defined() ? matmul(x, embed_in) : x;
    for (size_t k = 0; k < weights.size(); ++k) {
      Tensor layer = tanh(linear(h, weights[k], biases[k]));
      h = residual ? add(h, layer) : layer;
    }
    if (!embed_out.defined()) return h;
    return mean(pow(sub(matmul(h, embed_out, false, true), y), 2.0));
  }

  std::vector<std::pair<std::string, Tensor>> params() const {
    std::vector<std::pair<std::string, Tensor>> out;
    for (size_t k = 0; k < weights.size(); ++k) {
      out.emplace_back(str_cat("w", first + int64_t(k)), weights[k]);
      out.emplace_back(str_cat("b", first + int64_t(k)), biases[k]);
    }
    return out;
  }
};

// This rank's chunks of the toy model.
class ToyStage final : public PipelineStage {
 public:
  ToyStage(const Schedule& s, int rank, bool residual) : m_(s.microbatches) {
    for (int c = 0; c < s.virtual_stages; ++c)
      parts_.emplace_back(pipeline_stage_spec(kLayers, s.stages, s.virtual_stages, rank, c),
                          residual);
  }
  Tensor forward(int chunk, int micro, const Tensor& input) override {
    int64_t rows = kBatch / m_;
    Tensor x = input.defined() ? input : ops::narrow(x_, 0, micro * rows, rows);
    return parts_[size_t(chunk)].forward(x, ops::narrow(y_, 0, micro * rows, rows));
  }
  ActivationSpec activation_spec(int, int) const override { return {{kBatch / m_, kWidth}}; }
  std::vector<Tensor> tied_parameters() override {
    std::vector<Tensor> tied;
    for (const ToyPart& part : parts_)
      for (const Tensor& e : {part.embed_in, part.embed_out})
        if (e.defined()) tied.push_back(e);
    return tied;
  }
  void before_backward(int chunk, int, bool last) override {
    backward_calls.emplace_back(chunk, last);
  }
  const std::vector<ToyPart>& parts() const { return parts_; }
  std::vector<std::pair<int, bool>> backward_calls;  // (chunk, last) in order

 private:
  int m_;
  Tensor x_ = inputs(), y_ = targets();
  std::vector<ToyPart> parts_;
};

struct Reference {
  double loss = 0;
  std::map<std::string, Tensor> grads;  // "w3", "b3", "E"
};

// One process, m micro-batches accumulated in order, E as two copies summed at the end.
Reference accumulated_reference(int m, bool residual) {
  ToyPart whole(nn::StageSpec{}, residual);
  Tensor x = inputs(), y = targets();
  int64_t rows = kBatch / m;
  Reference ref;
  for (int i = 0; i < m; ++i) {
    Tensor loss =
        whole.forward(ops::narrow(x, 0, i * rows, rows), ops::narrow(y, 0, i * rows, rows));
    ref.loss += loss.item<double>();
    loss.backward(full(loss.shape(), 1.0 / m));
  }
  ref.loss /= m;
  for (auto& [name, p] : whole.params()) ref.grads[name] = p.grad();
  ref.grads["E"] = ops::add(whole.embed_in.grad(), whole.embed_out.grad());
  return ref;
}

Reference full_batch_reference(bool residual) {
  Tensor e = leaf(embedding_weight());
  ToyPart whole(nn::StageSpec{}, residual, e);
  Tensor loss = whole.forward(inputs(), targets());
  loss.backward();
  Reference ref{loss.item<double>(), {}};
  for (auto& [name, p] : whole.params()) ref.grads[name] = p.grad();
  ref.grads["E"] = e.grad();
  return ref;
}

bool bit_identical(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && to_vector<float>(a) == to_vector<float>(b);
}
// ||a - b|| / ||b||.
double relative_error(const Tensor& a, const Tensor& b) {
  std::vector<float> x = to_vector<float>(a), y = to_vector<float>(b);
  double diff = 0, norm = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    diff += (double(x[k]) - y[k]) * (double(x[k]) - y[k]);
    norm += double(y[k]) * y[k];
  }
  return std::sqrt(diff / norm);
}

// Runs the pipeline on `pp` and checks the loss and this rank's gradients.
void expect_pipeline_equals_one_process(ScheduleKind kind, int v, int m, Communicator& pp,
                                        Communicator* embedding, bool residual) {
  const int p = pp.size(), rank = pp.rank();
  Schedule schedule = make_schedule(kind, p, v, m, {.tied_embedding = true});
  SCOPED_TRACE(schedule.name() + " rank " + std::to_string(rank) +
               (residual ? " residual" : " plain"));
  ToyStage stage(schedule, rank, residual);
  PipelineOptions options;
  options.embedding = embedding;
  PipelineStepStats stats = run_pipeline(schedule, stage, pp, options);

  Reference exact = accumulated_reference(m, residual), full = full_batch_reference(residual);
  EXPECT_EQ(stats.loss, exact.loss);
  // fp32 loss terms of magnitude ~1 summed over 256 elements in another grouping: each
  // partial sum is off by at most ~n * 6e-8 relative, far below 1e-5.
  EXPECT_NEAR(stats.loss, full.loss, 1e-5 * std::abs(full.loss));
  // With p > 1 each copy of E holds the sum after the tied all-reduce; on one rank the test
  // sums the two copies itself.
  std::vector<Tensor> tied = stage.tied_parameters();
  if (p == 1) {
    ASSERT_EQ(tied.size(), 2u);
    EXPECT_TRUE(bit_identical(ops::add(tied[0].grad(), tied[1].grad()), exact.grads["E"]));
  }
  for (const ToyPart& part : stage.parts()) {
    std::vector<std::pair<std::string, Tensor>> params = part.params();
    for (const Tensor& e : {part.embed_in, part.embed_out})
      if (e.defined() && p > 1) params.emplace_back("E", e);
    for (auto& [name, param] : params) {
      ASSERT_TRUE(param.grad().defined()) << name;
      EXPECT_TRUE(bit_identical(param.grad(), exact.grads[name])) << name;
      // The full batch sums each weight gradient over 16 rows in one GEMM where the pipeline
      // adds m partial sums: a reordering of <= 16 fp32 terms per element, about
      // 16 * 6e-8 = 1e-6 of the terms' magnitude; 1e-5 leaves room for cancellation.
      EXPECT_LT(relative_error(param.grad(), full.grads[name]), 1e-5) << name;
    }
  }
  // Each chunk's last backward of the step, and only that one, is announced as the last.
  ASSERT_EQ(stage.backward_calls.size(), size_t(v * m));
  for (int c = 0; c < v; ++c) {
    int seen = 0;
    for (auto [chunk, last] : stage.backward_calls) {
      if (chunk != c) continue;
      ++seen;
      EXPECT_EQ(last, seen == m) << "chunk " << c << " backward " << seen;
    }
  }
  // Every sent output is freed before its backward when nothing else holds its buffer (the
  // residual add), and none when tanh saved it. Exact, not a lower bound: a chunk's gradient
  // arrives only after the peer received its output, and the executor reaps completed sends
  // after every action, the gradient's receive included.
  int sent = 0;
  for (const Action& a : schedule.ranks[size_t(rank)])
    sent += a.kind == ActionKind::send_activation;
  EXPECT_EQ(stats.outputs_freed, residual ? sent : 0);
  EXPECT_EQ(stats.outputs_kept, residual ? 0 : sent);
  // The executor held as many micro-batch chunks as the simulator predicts.
  SimulationResult sim = simulate(schedule);
  EXPECT_EQ(stats.peak_in_flight, sim.peak_in_flight[size_t(rank)]);
  EXPECT_GT(stats.busy_seconds, 0);
  EXPECT_GE(stats.group_bubble, 0);
  if (rank == 0)
    std::cout << "  " << schedule.name() << ": measured bubble " << stats.group_bubble
              << " (idle / busy over the group; oversubscribed ranks), simulated " << sim.bubble
              << ", ideal " << sim.ideal_bubble << "\n";
}

struct Layout {
  ScheduleKind kind;
  int v, m;
};

void run_layouts(const std::vector<Layout>& layouts, const MeshShape& shape) {
  DeviceMesh mesh(testing::test_world(), shape);
  for (const Layout& l : layouts)
    for (bool residual : {false, true})
      expect_pipeline_equals_one_process(l.kind, l.v, l.m, mesh.pp(), mesh.embedding(), residual);
}

RANK_TEST(PipelineExecutorN1, ChunksOnOneRankMatchOneProcess) {
  LocalCommunicator pp("pp");
  for (bool residual : {false, true}) {
    expect_pipeline_equals_one_process(ScheduleKind::gpipe, 1, 4, pp, nullptr, residual);
    expect_pipeline_equals_one_process(ScheduleKind::gpipe, 4, 2, pp, nullptr, residual);
    expect_pipeline_equals_one_process(ScheduleKind::interleaved, 2, 4, pp, nullptr, residual);
  }
}

RANK_TEST(PipelineExecutorN2, MatchesOneProcess) {
  run_layouts({{ScheduleKind::gpipe, 1, 4},
               {ScheduleKind::one_f_one_b, 1, 4},
               {ScheduleKind::one_f_one_b, 1, 1},
               {ScheduleKind::interleaved, 2, 4},
               {ScheduleKind::interleaved, 4, 8}},
              {1, 2, 1});
}

RANK_TEST(PipelineExecutorN4, MatchesOneProcess) {
  run_layouts({{ScheduleKind::gpipe, 1, 8},
               {ScheduleKind::one_f_one_b, 1, 8},
               {ScheduleKind::interleaved, 2, 4},
               {ScheduleKind::interleaved, 2, 8}},
              {1, 4, 1});
}

// Two data-parallel replicas of a 2-stage pipeline: the executor runs over the pp sub-group.
RANK_TEST(PipelineExecutorN4, RunsOnAPipelineSubGroup) {
  run_layouts({{ScheduleKind::one_f_one_b, 1, 4}, {ScheduleKind::interleaved, 2, 2}}, {2, 2, 1});
}

// Identity whose forward and backward take a fixed wall time without using a core, so the
// executor's timing can be checked on oversubscribed ranks.
class Sleep final : public autograd::Function {
 public:
  explicit Sleep(std::chrono::milliseconds forward) : forward_(forward) {}
  const char* name() const override { return "sleep"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    std::this_thread::sleep_for(forward_);
    return {ops::clone(in[0])};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    std::this_thread::sleep_for(2 * forward_);  // backward ~ twice the forward, as simulated
    return {g[0]};
  }

 private:
  std::chrono::milliseconds forward_;
};

class SleepStage final : public PipelineStage {
 public:
  SleepStage(const Schedule& s, int rank)
      : last_rank_(rank == s.stages - 1), v_(s.virtual_stages) {}
  Tensor forward(int chunk, int, const Tensor& input) override {
    Tensor x = input.defined() ? input : w_;
    Tensor y = autograd::apply_function(std::make_shared<Sleep>(std::chrono::milliseconds(20)),
                                        {mul(x, w_)})[0];
    return last_rank_ && chunk == v_ - 1 ? mean(y) : y;
  }
  ActivationSpec activation_spec(int, int) const override { return {{4}}; }

 private:
  bool last_rank_;
  int v_;
  Tensor w_ = leaf(ones({4}));
};

// With 20 ms forwards and 40 ms backwards the transfers and bookkeeping are small, and sleeping
// ranks do not compete for the two cores: the measured bubble lands near the simulated one.
RANK_TEST(PipelineExecutorN4, MeasuredBubbleTracksTheSimulator) {
  auto world = testing::test_world();
  for (auto [kind, v] : {std::pair{ScheduleKind::one_f_one_b, 1}, {ScheduleKind::interleaved, 2}}) {
    Schedule s = make_schedule(kind, 4, v, 8);
    SleepStage stage(s, world->rank());
    world->barrier();  // the group bubble assumes the ranks start together
    PipelineStepStats stats = run_pipeline(s, stage, *world);
    double simulated = simulate(s).bubble;
    if (world->rank() == 0)
      std::cout << "  " << s.name() << " with 20/40 ms sleeps: measured bubble "
                << stats.group_bubble << ", simulated " << simulated << "\n";
    // The dependencies force at least the simulated idle time; 0.05 below allows for ranks
    // leaving the barrier a few ms apart. Above, 0.15 allows for sleep overshoot, message
    // latency and a loaded machine.
    EXPECT_GT(stats.group_bubble, simulated - 0.05) << s.name();
    EXPECT_LT(stats.group_bubble, simulated + 0.15) << s.name();
  }
}

// Returns `out` from every chunk, whatever the schedule expects.
class FixedStage final : public PipelineStage {
 public:
  explicit FixedStage(Tensor out) : out_(std::move(out)) {}
  Tensor forward(int, int, const Tensor&) override { return out_; }
  ActivationSpec activation_spec(int, int) const override { return {{3}}; }

 private:
  Tensor out_;
};

using tessera::testing::error_of;

RANK_TEST(PipelineExecutorN1, RejectsMismatchedGroupsShapesAndLosses) {
  LocalCommunicator pp("pp");
  FixedStage two(leaf(ones({2})));
  std::string e =
      error_of([&] { run_pipeline(make_schedule(ScheduleKind::gpipe, 2, 1, 2), two, pp); });
  EXPECT_NE(e.find("is for 2 stages but the pipeline group pp has 1 ranks"), std::string::npos)
      << e;
  e = error_of([&] { run_pipeline(make_schedule(ScheduleKind::gpipe, 1, 1, 2), two, pp); });
  EXPECT_NE(e.find("(F m0 c0) of gpipe p1 v1 m2: the last stage must return the loss (one "
                   "element), got f32[2] on cpu"),
            std::string::npos)
      << e;
  // Chunk 0's output is checked against what chunk 1 will receive.
  e = error_of([&] { run_pipeline(make_schedule(ScheduleKind::gpipe, 1, 2, 2), two, pp); });
  EXPECT_NE(e.find("the chunk's output f32[2] on cpu does not match activation_spec(1, 0) = "
                   "f32[3] on cpu"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace tessera::parallel
