#include "tessera/autograd/checkpoint.h"

#include "tessera/autograd/engine.h"
#include "tessera/autograd/function.h"
#include "tessera/autograd/grad_mode.h"

namespace tessera::autograd {

namespace {

struct GeneratorState {
  Generator* gen;
  uint64_t seed, offset;
};

std::vector<GeneratorState> capture(const std::vector<Generator*>& gens) {
  std::vector<GeneratorState> s;
  for (Generator* g : gens) s.push_back({g, g->seed(), g->offset()});
  return s;
}

void restore(const std::vector<GeneratorState>& states) {
  for (const GeneratorState& s : states) s.gen->set_state(s.seed, s.offset);
}

class CheckpointFunction final : public Function {
 public:
  CheckpointFunction(SegmentFn fn, std::vector<Generator*> gens) : fn_(std::move(fn)) {
    gens.push_back(&default_generator());
    gens_ = std::move(gens);
  }
  const char* name() const override { return "checkpoint"; }
  // Parameters inside the segment need their gradients even when its inputs need none (the
  // first segment of a model often takes token embeddings that are plain data).
  bool records_without_grad_inputs() const override { return true; }

  std::vector<Tensor> forward(const std::vector<Tensor>& inputs) override {
    before_ = capture(gens_);
    save(inputs);
    for (const Tensor& t : inputs) input_requires_grad_.push_back(t.defined() && t.requires_grad());
    return fn_(inputs);
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < num_saved(); ++i) {
      Tensor t = saved(i);
      if (t.defined() && input_requires_grad_[i]) t.set_requires_grad(true);
      inputs.push_back(t);
    }
    // Recompute with the forward's random state, then put the current state back.
    std::vector<GeneratorState> now = capture(gens_);
    restore(before_);
    std::vector<Tensor> outputs;
    {
      EnableGradGuard enable;
      outputs = fn_(inputs);
    }
    restore(now);
    std::vector<Tensor> roots, root_grads;
    for (size_t i = 0; i < outputs.size() && i < grads.size(); ++i) {
      if (outputs[i].requires_grad()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grads[i]);
      }
    }
    if (!roots.empty()) autograd::backward(roots, root_grads, false);
    std::vector<Tensor> result;
    for (const Tensor& t : inputs) result.push_back(t.defined() ? t.grad() : Tensor());
    return result;
  }

 private:
  SegmentFn fn_;
  std::vector<Generator*> gens_;
  std::vector<GeneratorState> before_;
  std::vector<bool> input_requires_grad_;
};

}  // namespace

std::vector<Tensor> checkpoint(const SegmentFn& fn, const std::vector<Tensor>& inputs,
                               const std::vector<Generator*>& generators) {
  return apply_function(std::make_shared<CheckpointFunction>(fn, generators), inputs);
}

}  // namespace tessera::autograd
