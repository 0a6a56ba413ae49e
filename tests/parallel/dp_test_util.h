#pragma once
// Shared by the data-parallel tests: a GPT-shaped toy model that calls nn::UnitHooks (until
// nn::GPT does), and runners that train N steps single-process (nn::AdamW + clip_and_step) or
// data-parallel (each rank its slice of the same global batch), returning losses and weights.

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/nn/nn.h"
#include "tessera/parallel/data/data_parallel.h"
#include "tessera/tessera.h"

namespace tessera::parallel::testing {

// Tied embedding -> `layers` residual units x + gelu(fc(ln(x))) -> ln_f -> logits against the
// embedding -> cross-entropy. Parameter names follow nn::GPT, so gpt_units() applies.
class UnitStack : public nn::Module {
 public:
  UnitStack(int64_t vocab, int64_t width, int64_t layers, uint64_t seed = 11) {
    auto spec = [&](const std::string& name) {
      return nn::InitSpec{nn::param_key(seed, name), 0.1};
    };
    wte_ =
        register_module("wte", std::make_shared<nn::Embedding>(vocab, width, spec("wte.weight")));
    auto h = register_module("h", std::make_shared<nn::ModuleList>());
    for (int64_t i = 0; i < layers; ++i) {
      auto b = std::make_shared<Block>(width, spec("h." + std::to_string(i) + ".fc.weight"));
      h->append(b);
      blocks_.push_back(b);
    }
    ln_f_ = register_module("ln_f", std::make_shared<nn::LayerNorm>(width, true, 1e-5));
  }

  void set_hooks(std::shared_ptr<nn::UnitHooks> hooks) { hooks_ = std::move(hooks); }

  Tensor loss(const Tensor& ids, const Tensor& targets) const {
    Tensor x = after("embedding", wte_->forward(before("embedding", ids)));
    for (size_t i = 0; i < blocks_.size(); ++i) {
      const std::string unit = "h." + std::to_string(i);
      x = after(unit, blocks_[i]->forward(before(unit, x)));
    }
    x = before("head", x);
    Tensor logits = matmul(ln_f_->forward(x), wte_->weight(), false, true);
    return after("head", cross_entropy(logits, targets));
  }

 private:
  class Block : public nn::Module {
   public:
    Block(int64_t width, const nn::InitSpec& init) {
      ln_ = register_module("ln", std::make_shared<nn::LayerNorm>(width, true, 1e-5));
      fc_ = register_module("fc", std::make_shared<nn::Linear>(width, width, true, init));
    }
    Tensor forward(const Tensor& x) const { return x + gelu(fc_->forward(ln_->forward(x))); }

   private:
    std::shared_ptr<nn::LayerNorm> ln_;
    std::shared_ptr<nn::Linear> fc_;
  };

  Tensor before(const std::string& unit, const Tensor& x) const {
    return hooks_ ? hooks_->before(unit, x) : x;
  }
  Tensor after(const std::string& unit, const Tensor& x) const {
    return hooks_ ? hooks_->after(unit, x) : x;
  }

  std::shared_ptr<nn::Embedding> wte_;
  std::vector<std::shared_ptr<Block>> blocks_;
  std::shared_ptr<nn::LayerNorm> ln_f_;
  std::shared_ptr<nn::UnitHooks> hooks_;
};

// A model under test: its parameters, its loss, and where ZeRO-3's hooks go (may be empty).
struct TestModel {
  std::shared_ptr<nn::Module> module;
  std::function<Tensor(const Tensor&, const Tensor&)> loss;
  std::function<void(std::shared_ptr<nn::UnitHooks>)> set_hooks;
};

inline TestModel unit_stack(int64_t vocab = 29, int64_t width = 16, int64_t layers = 3) {
  auto m = std::make_shared<UnitStack>(vocab, width, layers);
  return {m, [m](const Tensor& x, const Tensor& y) { return m->loss(x, y); },
          [m](std::shared_ptr<nn::UnitHooks> h) { m->set_hooks(std::move(h)); }};
}

// nn::GPT, built with hooks that ZeRO-3 fills in once DataParallel exists.
inline TestModel tiny_gpt(const nn::GPTConfig& config) {
  auto hooks = std::make_shared<DeferredUnitHooks>();
  nn::ModelParallel parallel;
  parallel.hooks = hooks;
  auto m = std::make_shared<nn::GPT>(config, DType::f32, parallel);
  return {m, [m](const Tensor& x, const Tensor& y) { return m->loss(x, y); },
          [hooks](std::shared_ptr<nn::UnitHooks> h) { hooks->set_target(std::move(h)); }};
}

// The global batch of one step: inputs and next-token targets [B, T] from a fixed sequence.
struct Batch {
  Tensor inputs, targets;
};

inline Batch global_batch(int64_t step, int64_t B, int64_t T, int64_t vocab) {
  std::vector<int64_t> ids(size_t(B * (T + 1)));
  uint64_t x = uint64_t(step) * 2862933555777941757ull + 3037000493ull;
  for (auto& id : ids) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = int64_t((x >> 33) % uint64_t(vocab));
  }
  Tensor all = from_vector<int64_t>(ids, Shape{B, T + 1});
  return {ops::contiguous(ops::narrow(all, 1, 0, T)), ops::contiguous(ops::narrow(all, 1, 1, T))};
}

// Rows [begin, begin + count) of a batch, contiguous.
inline Batch rows(const Batch& b, int64_t begin, int64_t count) {
  return {ops::contiguous(ops::narrow(b.inputs, 0, begin, count)),
          ops::contiguous(ops::narrow(b.targets, 0, begin, count))};
}

struct RunSpec {
  int64_t first_step = 0;  // the batches of steps first_step .. first_step + steps - 1
  int64_t steps = 6;
  int64_t batch = 4;  // global sequences per step
  int64_t seq = 8;
  int64_t vocab = 29;
  int64_t micro_batches = 1;  // per rank per step
  nn::AdamWOptions adamw{/*lr=*/1e-2, 0.9, 0.95, 1e-8, /*weight_decay=*/0.1};
  double max_grad_norm = 0.5;
};

struct RunResult {
  std::vector<double> losses;  // the global mean loss of each step
  std::vector<double> norms;   // the pre-clip global gradient norm of each step
  std::vector<std::pair<std::string, std::vector<float>>> weights;  // after the last step
};

inline std::vector<std::pair<std::string, std::vector<float>>> snapshot(const nn::Module& m) {
  std::vector<std::pair<std::string, std::vector<float>>> out;
  for (const auto& [name, p] : m.named_parameters()) out.emplace_back(name, to_vector<float>(p));
  return out;
}

// One process, the whole global batch at once: the reference every layout must reproduce.
// `save` (optional) receives the final optimizer state.
inline RunResult run_single(const TestModel& model, const RunSpec& spec,
                            nn::OptimizerState* save = nullptr) {
  nn::AdamW opt(model.module->named_parameters(), spec.adamw);
  RunResult r;
  for (int64_t step = spec.first_step; step < spec.first_step + spec.steps; ++step) {
    Batch b = global_batch(step, spec.batch, spec.seq, spec.vocab);
    Tensor loss = model.loss(b.inputs, b.targets);
    r.losses.push_back(loss.item<float>());
    loss.backward();
    r.norms.push_back(nn::clip_and_step(opt, spec.max_grad_norm));
    opt.zero_grad();
  }
  r.weights = snapshot(*model.module);
  if (save != nullptr) *save = opt.state_dict();
  return r;
}

// Data parallel over `dp`: rank r trains on rows [r * B / dp, (r + 1) * B / dp), split into
// spec.micro_batches micro-batches; the reported loss is the mean over the group. `resume`
// (optional) is an optimizer state to start from; `save` (optional) receives the final one.
inline RunResult run_data_parallel(const TestModel& model, Communicator& dp,
                                   DataParallelConfig config, const RunSpec& spec,
                                   const nn::OptimizerState* resume = nullptr,
                                   nn::OptimizerState* save = nullptr) {
  config.adamw = spec.adamw;
  config.max_grad_norm = spec.max_grad_norm;
  auto ddp = std::make_unique<DataParallel>(model.module->named_parameters(), dp, config);
  if (resume != nullptr) ddp->load_optimizer_state(*resume);
  if (ddp->unit_hooks()) model.set_hooks(ddp->unit_hooks());
  const int64_t local = spec.batch / dp.size(), micro = local / spec.micro_batches;
  RunResult r;
  for (int64_t step = spec.first_step; step < spec.first_step + spec.steps; ++step) {
    Batch b = global_batch(step, spec.batch, spec.seq, spec.vocab);
    double loss_sum = 0;
    for (int64_t m = 0; m < spec.micro_batches; ++m) {
      Batch mb = rows(b, dp.rank() * local + m * micro, micro);
      Tensor loss = model.loss(mb.inputs, mb.targets);
      loss_sum += loss.item<float>();
      if (spec.micro_batches > 1) loss = mul(loss, 1.0 / double(spec.micro_batches));
      ddp->backward(loss, m == spec.micro_batches - 1);
    }
    Tensor mean = scalar_tensor(loss_sum / double(spec.micro_batches), DType::f64);
    dp.all_reduce(mean, CommOp::avg);
    r.losses.push_back(mean.item<double>());
    StepResult s = ddp->step();
    r.norms.push_back(s.grad_norm);
    ddp->zero_grad();
  }
  ddp->gather_parameters();
  r.weights = snapshot(*model.module);
  ddp->release_parameters();
  if (save != nullptr) *save = ddp->optimizer_state();
  if (model.set_hooks) model.set_hooks(nullptr);
  return r;
}

// max over parameters of ||a - b|| / ||b||.
inline double max_relative_error(const RunResult& a, const RunResult& b,
                                 std::string* worst_name = nullptr) {
  double worst = 0;
  for (size_t i = 0; i < a.weights.size(); ++i) {
    const auto& x = a.weights[i].second;
    const auto& y = b.weights[i].second;
    double diff = 0, ref = 0;
    for (size_t k = 0; k < x.size(); ++k) {
      diff += (double(x[k]) - y[k]) * (double(x[k]) - y[k]);
      ref += double(y[k]) * y[k];
    }
    const double rel = std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
    if (rel > worst && worst_name != nullptr) *worst_name = a.weights[i].first;
    worst = std::max(worst, rel);
  }
  return worst;
}

}  // namespace tessera::parallel::testing
