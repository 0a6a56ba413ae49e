#include "tessera/parallel/data/grad_reducer.h"

#include <algorithm>

#include "tessera/autograd/engine.h"
#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/elementwise.h"
#include "tessera/core/ops/movement.h"

namespace tessera::parallel {

GradReducer::GradReducer(const FlatLayout& layout, int stage, Communicator& dp,
                         Communicator* tied_group, GradCompression compression, bool overlap)
    : layout_(layout),
      stage_(stage),
      dp_(&dp),
      tied_(tied_group),
      rank_(dp_->rank()),
      compression_(compression),
      overlap_(overlap),
      self_(std::make_shared<GradReducer*>(this)) {
  const std::string unfit = grad_compression_error(compression_, stage_, false);
  TESSERA_CHECK(unfit.empty(), "GradReducer (group ", dp.name(), "): ", unfit);
  const bool peers = dp.size() > 1;
  bf16_ = peers && compression_.kind == CompressionKind::bf16;
  if (peers && compression_.kind == CompressionKind::powersgd)
    powersgd_ = std::make_unique<PowerSgd>(layout, compression_.rank, compression_.seed);
  const auto& spaces = layout.spaces();
  const size_t num_buckets = layout.buckets().size();
  const Device device = layout.params().front().tensor.device();
  if (stage_ <= 1) {
    for (const auto& s : spaces) full_.push_back(zeros(Shape{s.numel}, s.dtype, device));
    for (const auto& p : layout.params()) {
      Tensor g = ops::reshape(
          ops::narrow(full_[size_t(p.space)], 0,
                      layout.buckets()[size_t(p.bucket)].flat_offset + p.offset, p.tensor.numel()),
          p.tensor.shape());
      p.tensor.set_grad(g);
    }
  }
  if (stage_ >= 1)
    for (const auto& s : spaces) shards_.push_back(zeros(Shape{s.shard_numel}, s.dtype, device));
  staging_.resize(num_buckets);
  shard_written_.assign(num_buckets, false);
  arrived_.assign(num_buckets, 0);
  announced_.assign(num_buckets, false);
  reduced_.resize(num_buckets);
  wire_.resize(num_buckets);
  if (stage_ == 0) gather_ = dp.split(0, dp.rank(), dp.name() + ".gather");  // collective

  std::weak_ptr<GradReducer*> weak = self_;
  for (size_t i = 0; i < layout.params().size(); ++i) {
    autograd::register_post_accumulate_hook(layout.params()[i].tensor, [weak, i](const Tensor&) {
      if (auto self = weak.lock()) (*self)->on_grad(int(i));
    });
  }
}

GradReducer::~GradReducer() {
  // Reductions still in flight write into buffers this object owns.
  for (Pending& p : pending_)
    if (p.work) p.work->wait();
  for (auto& w : gathers_) w->wait();
}

void GradReducer::set_step(int64_t step) {
  compressing_ = powersgd_ != nullptr && step >= compression_.warmup_steps;
}

Tensor GradReducer::staging(int b) {
  const auto& k = layout_.buckets()[size_t(b)];
  // bf16 compression stages ZeRO 2/3 gradients in bf16 (what travels; half the memory).
  const DType dtype = bf16_ ? DType::bf16 : layout_.spaces()[size_t(k.space)].dtype;
  auto& storage = staging_[size_t(b)];
  const bool fresh = storage == nullptr || storage->released();
  if (storage == nullptr) {
    storage = std::make_shared<Storage>(size_t(k.numel) * dtype_size(dtype),
                                        layout_.params().front().tensor.device());
  } else if (storage->released()) {
    storage->reallocate();
  }
  Tensor t(storage, Shape{k.numel}, Strides{1}, 0, dtype);
  if (fresh) ops::zero_(t);  // padding, and parameters that get no gradient this pass
  return t;
}

double GradReducer::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - pass_start_).count();
}

void GradReducer::completed(const Pending& p) {
  if (p.event < timeline_.events.size()) timeline_.events[p.event].completed = now();
}

void GradReducer::on_grad(int param) {
  NoGradGuard no_grad;
  if (!pass_open_) {
    pass_open_ = true;
    pass_start_ = std::chrono::steady_clock::now();
    timeline_ = {};
  }
  const auto& p = layout_.params()[size_t(param)];
  TESSERA_CHECK(p.bucket >= next_launch_, "data parallel: the gradient of '", p.name,
                "' arrived after its bucket was reduced in this pass; call finish() after "
                "each backward pass");
  if (stage_ <= 1) {
    const Tensor g = p.tensor.grad();
    TESSERA_CHECK(g.defined() && g.storage() == full_[size_t(p.space)].storage(),
                  "data parallel: the gradient of '", p.name,
                  "' is no longer a view into the flat gradient buffer; it was reset outside "
                  "DataParallel (use DataParallel::zero_grad, not Module or Optimizer zero_grad)");
    if (!sync_) return;
  } else {
    Tensor slot = ops::reshape(ops::narrow(staging(p.bucket), 0, p.offset, p.tensor.numel()),
                               p.tensor.shape());
    ops::copy_(slot, p.tensor.grad());
    p.tensor.set_grad(Tensor());
  }
  ++arrived_[size_t(p.bucket)];
  if (!overlap_) return;  // finish() launches everything
  launch_ready(true);
  poll();
}

void GradReducer::poll() {
  if (compressing_) return progress_powersgd(false);
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->work->test()) {
      completed(*it);
      complete(*it, true);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& w : gathers_) w->test();  // lets MPI progress them
}

void GradReducer::launch_ready(bool in_backward) {
  const auto& buckets = layout_.buckets();
  while (next_launch_ < int(buckets.size()) &&
         (!in_backward ||
          arrived_[size_t(next_launch_)] >= int(buckets[size_t(next_launch_)].params.size()))) {
    launch(next_launch_++, in_backward);
    ++(in_backward ? stats_.launched_in_backward : stats_.launched_in_finish);
  }
}

void GradReducer::launch(int b, bool in_backward) {
  timeline_.events.push_back({b, now(), 0});
  if (compressing_) return launch_powersgd(b);
  // ZeRO 0 on one rank: the full gradient is its own average, and the reduce-scatter and
  // all-gather would only copy it out and back (through a bucket-sized temporary each).
  if (stage_ == 0 && dp_->size() == 1) return;
  const int64_t s = layout_.shard_numel(b);
  Pending p;
  p.bucket = b;
  Tensor in;
  if (stage_ <= 1) {
    in = full_grad(b);
    p.out = stage_ == 0 ? empty(Shape{s}, in.dtype(), in.device()) : shard_grad(b);
    if (bf16_) in = ops::cast(in, DType::bf16);  // the Work keeps it alive
  } else {
    in = staging(b);
    p.add = shard_written_[size_t(b)];
    p.out = p.add ? empty(Shape{s}, DType::f32, in.device()) : shard_grad(b);
    shard_written_[size_t(b)] = true;
  }
  p.work = dp_->reduce_scatter_async(in, p.out, CommOp::avg);
  p.event = timeline_.events.size() - 1;
  // The shard is final the moment the collective that writes it is queued, if that runs on the
  // communication stream and nothing is added or summed into the shard after it.
  if (stage_ >= 1 && !p.add && !tied_later(b) && p.work->on_comm_stream())
    shard_ready(b, false, in_backward);
  pending_.push_back(std::move(p));
}

bool GradReducer::tied_later(int b) const {
  return tied_ != nullptr && layout_.buckets()[size_t(b)].tied;
}

void GradReducer::shard_ready(int b, bool after_compute, bool in_backward) {
  if (!sync_ || !shard_ready_ || announced_[size_t(b)]) return;
  announced_[size_t(b)] = true;
  if (in_backward) ++stats_.ready_in_backward;
  shard_ready_(b, after_compute);
}

void GradReducer::launch_powersgd(int b) {
  Pending p;
  p.bucket = b;
  const bool matrices = powersgd_->compresses(b);
  p.phase = matrices ? Phase::p : Phase::whole;
  p.out = matrices ? powersgd_->begin(b, full_grad(b)) : full_grad(b);  // issued in progress
  p.event = timeline_.events.size() - 1;
  pending_.push_back(std::move(p));
  progress_powersgd(false);
}

// PowerSGD's all-reduces form one chain on the dp group, in bucket order, one in flight:
// P(0), Q(0), P(1), Q(1), ... MPI's all-reduce runs in phases (an all-to-all, then an
// all-gather issued from a later poll) and MPI matches a group's collectives by the order each
// rank issues them, so two in flight could interleave their halves differently on two ranks;
// and two queues on two groups, each waited on in turn, can deadlock (a rank blocked on one
// does not issue the next of the other, which its peer is blocked on). The chain is the same
// on every rank whatever the timing, and a rank blocked on link k needs only what every peer
// reaches by finishing the links before k. It still runs while backward computes.
void GradReducer::progress_powersgd(bool block) {
  while (!pending_.empty()) {
    Pending& p = pending_.front();
    if (!p.work) {
      p.work = dp_->all_reduce_async(p.out, CommOp::avg);
      int64_t in_flight = 0;
      for (const Pending& other : pending_) in_flight += other.work != nullptr;
      stats_.powersgd_in_flight = std::max(stats_.powersgd_in_flight, in_flight);
    }
    if (block)
      p.work->wait();
    else if (!p.work->test())
      return;
    const int b = p.bucket;
    if (p.phase == Phase::p) {  // the Q all-reduce of the same bucket is the next link
      p.phase = Phase::q;
      p.out = powersgd_->middle(b, full_grad(b));
      p.work = nullptr;
      continue;
    }
    if (p.phase == Phase::q) powersgd_->end(b, full_grad(b));
    completed(p);
    finish_powersgd_bucket(b);
    if (!tied_later(b)) shard_ready(b, true, !block);
    pending_.erase(pending_.begin());
  }
}

void GradReducer::finish_powersgd_bucket(int b) {
  if (stage_ == 1) {
    const int64_t s = layout_.shard_numel(b);
    ops::copy_(shard_grad(b), ops::narrow(full_grad(b), 0, rank_ * s, s));
  }
}

void GradReducer::complete(Pending& p, bool in_backward) {
  if (stage_ == 0) {
    // bf16: every rank applies the same bf16-rounded average, its own shard included.
    reduced_[size_t(p.bucket)] = bf16_ ? ops::cast(p.out, DType::bf16) : p.out;
    issue_gathers(in_backward);
    return;
  }
  if (p.add) ops::add_(shard_grad(p.bucket), p.out);
  if (stage_ >= 2) staging_[size_t(p.bucket)]->release();
  if (!tied_later(p.bucket)) shard_ready(p.bucket, true, in_backward);
}

void GradReducer::issue_gathers(bool in_backward) {
  // In bucket order: a bucket whose reduce-scatter finished early waits for the ones before.
  while (next_gather_ < next_launch_ && reduced_[size_t(next_gather_)].defined()) {
    Tensor shard = std::move(reduced_[size_t(next_gather_)]);  // the Work keeps it alive
    Tensor full = full_grad(next_gather_);
    if (bf16_) {
      wire_[size_t(next_gather_)] = empty(Shape{full.numel()}, DType::bf16, full.device());
      full = wire_[size_t(next_gather_)];
    }
    gathers_.push_back(gather_->all_gather_async(shard, full));
    ++next_gather_;
    if (in_backward) ++stats_.gathered_in_backward;
  }
}

void GradReducer::finish() {
  NoGradGuard no_grad;
  const auto& buckets = layout_.buckets();
  const bool reduce = sync_ || stage_ >= 2;
  if (!pass_open_) {  // no gradient arrived in this pass (all frozen): time from here
    pass_start_ = std::chrono::steady_clock::now();
    timeline_ = {};
  }
  timeline_.finish_start = now();
  if (reduce) launch_ready(false);
  if (compressing_) {
    progress_powersgd(true);
  } else {
    for (Pending& p : pending_) {
      p.work->wait();
      completed(p);
      complete(p, false);
    }
    pending_.clear();
  }
  for (auto& w : gathers_) w->wait();
  gathers_.clear();
  for (int b = 0; b < next_gather_; ++b) {
    if (!wire_[size_t(b)].defined()) continue;
    ops::copy_(full_grad(b), wire_[size_t(b)]);  // bf16 -> f32, exact
    wire_[size_t(b)] = Tensor();
  }
  next_gather_ = 0;
  if (sync_ && tied_ != nullptr) {
    // Tied buckets are sharded identically on every stage that holds a copy, so the reduced
    // shards (or, at ZeRO 0, the full averages) can be summed directly.
    for (size_t b = 0; b < buckets.size(); ++b)
      if (buckets[b].tied) tied_->all_reduce(stage_ == 0 ? full_grad(int(b)) : shard_grad(int(b)));
  }
  // What is left: tied buckets, ZeRO 0 (final once gathered), buckets with no collective.
  for (size_t b = 0; b < buckets.size(); ++b) shard_ready(int(b), true, false);
  announced_.assign(buckets.size(), false);
  arrived_.assign(buckets.size(), 0);
  next_launch_ = 0;
  timeline_.finish_end = now();
  pass_open_ = false;
}

void GradReducer::zero_grad() {
  NoGradGuard no_grad;
  TESSERA_CHECK(pending_.empty(),
                "data parallel: zero_grad while reductions are in flight; ",
                "call finish() after backward");
  for (const Tensor& t : full_) ops::zero_(t);
  if (stage_ >= 2)
    shard_written_.assign(shard_written_.size(), false);
  else
    for (const Tensor& t : shards_) ops::zero_(t);
}

Tensor GradReducer::shard_grad(int b) const {
  const auto& k = layout_.buckets()[size_t(b)];
  const int64_t s = layout_.shard_numel(b);
  if (stage_ == 0) return ops::narrow(full_grad(b), 0, rank_ * s, s);
  return ops::narrow(shards_[size_t(k.space)], 0, k.shard_offset, s);
}

Tensor GradReducer::full_grad(int b) const {
  TESSERA_ASSERT(stage_ <= 1, "full gradients exist at ZeRO 0 and 1 only");
  const auto& k = layout_.buckets()[size_t(b)];
  return ops::narrow(full_[size_t(k.space)], 0, k.flat_offset, k.numel);
}

int64_t GradReducer::held_bytes() const {
  int64_t bytes = 0;
  for (const Tensor& t : full_) bytes += int64_t(t.nbytes());
  for (const Tensor& t : shards_) bytes += int64_t(t.nbytes());
  for (const auto& s : staging_)
    if (s != nullptr && !s->released()) bytes += int64_t(s->nbytes());
  if (powersgd_) bytes += powersgd_->held_bytes();
  return bytes;
}

}  // namespace tessera::parallel
