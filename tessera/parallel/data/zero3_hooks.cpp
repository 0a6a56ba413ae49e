#include "tessera/parallel/data/zero3_hooks.h"

#include "tessera/autograd/function.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"

namespace tessera::parallel {

namespace {

// Identity forward; its backward runs when the unit's backward has reached the unit's input.
class BeginUnit final : public autograd::Function {
 public:
  BeginUnit(std::weak_ptr<Zero3Hooks> hooks, std::shared_ptr<Zero3Hooks::Use> use)
      : hooks_(std::move(hooks)), use_(std::move(use)) {}
  const char* name() const override { return "zero3_begin_unit"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0]}; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (auto hooks = hooks_.lock()) hooks->end_backward(use_);
    return {g[0]};
  }

 private:
  std::weak_ptr<Zero3Hooks> hooks_;
  std::shared_ptr<Zero3Hooks::Use> use_;
};

// Identity forward; its backward runs before any of the unit's backward (the unit's output
// gradient is complete), so it gathers the parameters the unit's backward reads.
class EndUnit final : public autograd::Function {
 public:
  EndUnit(std::weak_ptr<Zero3Hooks> hooks, std::shared_ptr<Zero3Hooks::Use> use)
      : hooks_(std::move(hooks)), use_(std::move(use)) {}
  const char* name() const override { return "zero3_end_unit"; }
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0]}; }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    if (auto hooks = hooks_.lock()) hooks->hold_for_backward(use_);
    return {g[0]};
  }

 private:
  std::weak_ptr<Zero3Hooks> hooks_;
  std::shared_ptr<Zero3Hooks::Use> use_;
};

bool records(const Tensor& x) {
  return is_grad_enabled() && x.defined() && x.requires_grad();
}

}  // namespace

Zero3Hooks::Zero3Hooks(const FlatLayout& layout, FlatParams& params, Communicator& dp,
                       bool prefetch)
    : layout_(layout),
      params_(params),
      dp_(&dp),
      refs_(layout.buckets().size(), 0),
      inflight_(layout.buckets().size()),
      prefetched_(layout.buckets().size(), 0),
      prefetch_(prefetch),
      open_(layout.units().size()) {
  TESSERA_CHECK(params.sharded(), "Zero3Hooks: the parameters are not sharded");
  TESSERA_CHECK(!layout.units().empty(), "Zero3Hooks: the layout has no units");
}

int Zero3Hooks::unit_index(const std::string& unit, const char* hook) const {
  const int u = layout_.find_unit(unit);
  if (u < 0) {
    std::string known;
    for (const auto& k : layout_.units()) known += (known.empty() ? "" : ", ") + k.name;
    detail::throw_error("ZeRO-3 ", hook, "(\"", unit, "\"): no such unit; the layout has ", known);
  }
  return u;
}

void Zero3Hooks::acquire_buckets(const std::vector<int>& buckets) {
  for (int b : buckets)
    if (refs_[size_t(b)]++ == 0) {
      if (prefetched_[size_t(b)]) {
        prefetched_[size_t(b)] = 0;  // the unit takes over the prefetch's hold
        ++prefetch_hits_;
      } else {
        inflight_[size_t(b)] = params_.gather_async(b, *dp_);
        ++gathers_;
      }
    }
  for (int b : buckets)
    if (auto& w = inflight_[size_t(b)]) {
      w->wait();
      w = nullptr;
    }
}

void Zero3Hooks::release_buckets(const std::vector<int>& buckets) {
  for (int b : buckets) {
    TESSERA_ASSERT(refs_[size_t(b)] > 0, "ZeRO-3: bucket ", b,
                   " released more often than gathered");
    if (--refs_[size_t(b)] == 0) params_.release(b);
  }
}

void Zero3Hooks::prefetch(int unit) {
  for (int b : layout_.units()[size_t(unit)].buckets) {
    if (refs_[size_t(b)] > 0 || prefetched_[size_t(b)]) continue;
    inflight_[size_t(b)] = params_.gather_async(b, *dp_);
    prefetched_[size_t(b)] = 1;
    ++gathers_;
    ++prefetches_;
  }
}

void Zero3Hooks::poll() {
  for (auto& w : inflight_)
    if (w && w->test()) w = nullptr;
}

void Zero3Hooks::acquire(int unit, bool traced) {
  acquire_buckets(layout_.units()[size_t(unit)].buckets);
  constexpr size_t kMaxTrace = size_t(1) << 16;  // backward passes without a step stop here
  if (!traced || recording_.size() >= kMaxTrace) return;
  recording_.push_back(unit);
  if (on_trace_ && position_ < trace_.size() && trace_[position_] == unit) {
    ++position_;
    if (prefetch_ && position_ < trace_.size()) prefetch(trace_[position_]);
  } else {
    on_trace_ = false;
  }
}

void Zero3Hooks::end_step() {
  for (size_t b = 0; b < prefetched_.size(); ++b) {
    if (!prefetched_[b]) continue;
    if (inflight_[b]) inflight_[b]->wait();
    inflight_[b] = nullptr;
    prefetched_[b] = 0;
    params_.release(int(b));
  }
  trace_ = std::move(recording_);
  recording_.clear();
  position_ = 0;
  on_trace_ = true;
}

void Zero3Hooks::release(int unit) {
  release_buckets(layout_.units()[size_t(unit)].buckets);
}

Tensor Zero3Hooks::before(const std::string& unit, const Tensor& x) {
  const int u = unit_index(unit, "before");
  acquire(u, is_grad_enabled());
  auto use = std::make_shared<Use>();
  use->unit = u;
  open_[size_t(u)] = use;
  if (!records(x)) return x;
  return autograd::apply_function(std::make_shared<BeginUnit>(weak_from_this(), use), {x})[0];
}

Tensor Zero3Hooks::after(const std::string& unit, const Tensor& x) {
  const int u = unit_index(unit, "after");
  std::shared_ptr<Use> use = std::move(open_[size_t(u)]);
  TESSERA_CHECK(use != nullptr, "ZeRO-3 after(\"", unit, "\") without a matching before()");
  release(u);
  poll();
  if (!records(x)) return x;
  return autograd::apply_function(std::make_shared<EndUnit>(weak_from_this(), use), {x})[0];
}

void Zero3Hooks::hold_for_backward(const std::shared_ptr<Use>& use) {
  if (use->held) return;
  acquire(use->unit);
  use->held = true;
  held_.push_back(use);
}

void Zero3Hooks::end_backward(const std::shared_ptr<Use>& use) {
  if (!use->held) return;
  release(use->unit);
  use->held = false;
  poll();
}

void Zero3Hooks::finish() {
  for (const auto& use : held_) end_backward(use);
  held_.clear();
}

void Zero3Hooks::refresh() {
  std::vector<std::shared_ptr<Work>> works;
  for (size_t b = 0; b < refs_.size(); ++b)
    if (refs_[b] > 0) works.push_back(params_.gather_async(int(b), *dp_));
  for (auto& w : works) w->wait();
}

void Zero3Hooks::gather_all() {
  if (all_held_) return;
  std::vector<int> all(layout_.buckets().size());
  for (size_t b = 0; b < all.size(); ++b) all[b] = int(b);
  acquire_buckets(all);
  all_held_ = true;
}

void Zero3Hooks::release_all() {
  if (!all_held_) return;
  std::vector<int> all(layout_.buckets().size());
  for (size_t b = 0; b < all.size(); ++b) {
    all[b] = int(b);
    params_.write_back(int(b));
  }
  release_buckets(all);
  all_held_ = false;
}

}  // namespace tessera::parallel
