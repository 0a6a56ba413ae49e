#include "tessera/parallel/data/zero_adamw.h"

#include <map>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/optim.h"

namespace tessera::parallel {

ZeroAdamW::ZeroAdamW(const FlatLayout& layout, int stage, int dp_rank,
                     const nn::AdamWOptions& options, HostTransfers* host, DType rounded)
    : layout_(layout),
      stage_(stage),
      rank_(dp_rank),
      options_(options),
      host_(host),
      rounded_dtype_(rounded),
      device_(layout.params().front().tensor.device()) {
  options_.validate();
  for (const auto& p : layout.params())
    TESSERA_CHECK(p.tensor.dtype() == DType::f32, "data-parallel AdamW: parameter '", p.name,
                  "' must be f32 (master weights), got ", p.tensor.describe());
  TESSERA_CHECK(host_ == nullptr || stage_ >= 1, "data-parallel AdamW: an offloaded optimizer ",
                "updates this rank's shards; ZeRO stage ", stage_, " has none (use 1, 2 or 3)");
  TESSERA_CHECK(host_ == nullptr || rounded_dtype_ == DType::bf16 || rounded_dtype_ == DType::f16,
                "data-parallel AdamW: an offloaded optimizer rounds the master to bf16 or f16, ",
                "got ", dtype_name(rounded_dtype_));
  for (const auto& s : layout.spaces()) {
    const int64_t n = stage_ == 0 ? s.numel : s.shard_numel;
    if (host_ != nullptr) {
      m_.push_back(host_->host_empty(n, DType::f32));
      v_.push_back(host_->host_empty(n, DType::f32));
      host_grads_.push_back(host_->host_empty(n, DType::f32));
      rounded_.push_back(host_->host_empty(n, rounded_dtype_));
    } else {
      m_.push_back(zeros(Shape{n}, DType::f32, device_));
      v_.push_back(zeros(Shape{n}, DType::f32, device_));
    }
  }
  tickets_.assign(layout.buckets().size(), -1);
  // A version no storage has yet: the first rounded_shard rounds.
  rounded_version_.assign(layout.spaces().size(), ~uint64_t(0));
  for (size_t b = 0; b < layout.buckets().size(); ++b) {
    const int64_t n = layout.buckets()[b].numel;
    const int64_t origin = stage_ == 0 ? 0 : rank_ * (n / layout.dp_size());
    const int64_t end = stage_ == 0 ? n : origin + n / layout.dp_size();
    for (const Segment& seg : layout.segments(int(b), origin, end)) {
      const bool decay = layout.params()[size_t(seg.param)].tensor.dim() >= 2;
      const int64_t offset = seg.bucket_offset - origin;
      if (!runs_.empty() && runs_.back().bucket == int(b) &&
          runs_.back().offset + runs_.back().length == offset && runs_.back().decay == decay) {
        runs_.back().length += seg.length;
      } else {
        runs_.push_back({int(b), offset, seg.length, decay});
      }
    }
  }
}

void ZeroAdamW::set_lr(double lr) {
  nn::AdamWOptions o = options_;
  o.lr = lr;
  o.validate();
  options_ = o;
}

Tensor ZeroAdamW::state_of(int slot, int b) const {
  const auto& k = layout_.buckets()[size_t(b)];
  const Tensor& buffer = (slot == 0 ? m_ : v_)[size_t(k.space)];
  if (stage_ == 0) return ops::narrow(buffer, 0, k.flat_offset, k.numel);
  return ops::narrow(buffer, 0, k.shard_offset, layout_.shard_numel(b));
}

void ZeroAdamW::step(const FlatParams& params, const GradReducer& grads, double grad_scale) {
  NoGradGuard no_grad;
  ++step_;
  AdamWArgs args;
  args.lr = float(options_.lr);
  args.beta1 = float(options_.beta1);
  args.beta2 = float(options_.beta2);
  args.eps = float(options_.eps);
  args.step = step_;
  args.grad_scale = float(grad_scale);
  // Offloaded: the gradient shards not yet on their way start down now, in bucket order (the
  // order of the runs), so the CPU waits only for the bucket it is about to update.
  if (host_ != nullptr) {
    TESSERA_CHECK(params.offloaded(), "data-parallel AdamW: offloaded, but the parameters' ",
                  "shards are not in host memory");
    early_downloads_ = 0;
    for (size_t b = 0; b < layout_.buckets().size(); ++b) {
      if (tickets_[b] >= 0)
        ++early_downloads_;
      else
        download_grad(grads, int(b), true);
    }
  }
  int cached = -1;
  Tensor param, grad, m, v, rounded;
  for (const Run& r : runs_) {
    if (r.bucket != cached) {
      cached = r.bucket;
      param = stage_ == 0 ? params.bucket(r.bucket) : params.shard(r.bucket);
      m = state_of(0, r.bucket);
      v = state_of(1, r.bucket);
      if (host_ != nullptr) {
        host_->wait(tickets_[size_t(r.bucket)]);
        grad = host_region(host_grads_, r.bucket);
        rounded = host_region(rounded_, r.bucket);
      } else {
        grad = stage_ == 0 ? grads.full_grad(r.bucket) : grads.shard_grad(r.bucket);
      }
    }
    args.weight_decay = r.decay ? float(options_.weight_decay) : 0.0f;
    ops::adamw_step_(
        ops::narrow(param, 0, r.offset, r.length), ops::narrow(grad, 0, r.offset, r.length),
        ops::narrow(m, 0, r.offset, r.length), ops::narrow(v, 0, r.offset, r.length), args,
        rounded.defined() ? ops::narrow(rounded, 0, r.offset, r.length) : Tensor());
  }
  if (host_ != nullptr) {
    drop_downloads();
    // The update wrote the rounded copy of every element it changed (padding stays zero in
    // both), so the copy is current with the master's storage as the update left it.
    for (size_t s = 0; s < layout_.spaces().size(); ++s)
      rounded_version_[s] = master_version(params, int(s));
  }
}

void ZeroAdamW::download_grad(const GradReducer& grads, int b, bool after_compute) {
  TESSERA_CHECK(host_ != nullptr, "ZeroAdamW::download_grad: the optimizer is not offloaded");
  TESSERA_CHECK(b >= 0 && b < int(tickets_.size()), "ZeroAdamW::download_grad: bucket ", b, " of ",
                tickets_.size());
  // A second download of the same bucket (another backward before the step) queues behind the
  // first on the copy stream and lands last; the step waits for the newest.
  tickets_[size_t(b)] =
      host_->download(grads.shard_grad(b), host_region(host_grads_, b),
                      after_compute ? HostTransfers::After::compute : HostTransfers::After::comm);
}

void ZeroAdamW::drop_downloads() {
  if (host_ == nullptr) return;
  host_->end_downloads();
  tickets_.assign(tickets_.size(), -1);
}

Tensor ZeroAdamW::host_region(const std::vector<Tensor>& per_space, int b) const {
  const auto& k = layout_.buckets()[size_t(b)];
  return ops::narrow(per_space[size_t(k.space)], 0, k.shard_offset, layout_.shard_numel(b));
}

uint64_t ZeroAdamW::master_version(const FlatParams& params, int space) const {
  for (size_t b = 0; b < layout_.buckets().size(); ++b)
    if (layout_.buckets()[b].space == space) return params.shard(int(b)).storage()->version();
  return 0;
}

Tensor ZeroAdamW::rounded_shard(const FlatParams& params, int b) {
  TESSERA_CHECK(host_ != nullptr, "ZeroAdamW::rounded_shard: the optimizer is not offloaded");
  const int space = layout_.buckets()[size_t(b)].space;
  const uint64_t now = master_version(params, space);
  if (rounded_version_[size_t(space)] != now) {
    host_->sync_uploads();  // an upload of the old values may still read these buffers
    NoGradGuard no_grad;
    for (size_t k = 0; k < layout_.buckets().size(); ++k)
      if (layout_.buckets()[k].space == space)
        ops::copy_(host_region(rounded_, int(k)), params.shard(int(k)));
    rounded_version_[size_t(space)] = master_version(params, space);
  }
  return host_region(rounded_, b);
}

std::unique_ptr<nn::AdamW> ZeroAdamW::format() const {
  nn::StateDict params;
  for (const auto& p : layout_.params()) params.emplace_back(p.name, p.tensor);
  return std::make_unique<nn::AdamW>(params, options_);
}

std::unique_ptr<nn::AdamW> ZeroAdamW::stand_in_format() const {
  nn::StateDict params;
  for (const auto& p : layout_.params()) {
    Tensor stand_in = empty(Shape(std::vector<int64_t>(size_t(p.tensor.dim()), 0)), DType::f32,
                            p.tensor.device());
    stand_in.set_requires_grad(true);
    params.emplace_back(p.name, stand_in);
  }
  return std::make_unique<nn::AdamW>(params, options_);
}

nlohmann::json ZeroAdamW::scalars() const {
  nlohmann::json s = stand_in_format()->state_dict().scalars;
  s["step"] = step_;
  s["lr"] = options_.lr;
  return s;
}

nn::OptimizerState ZeroAdamW::gather_state(Communicator& dp) const {
  NoGradGuard no_grad;
  // On one rank the moments are whole here: the state is views of them, named, ordered and
  // described as nn::AdamW's, from an AdamW over zero-element stand-ins of the parameters (same
  // names and ranks: all its groups depend on), so that no second copy of the moments is made.
  const bool views = dp.size() == 1;
  std::unique_ptr<nn::AdamW> out = views ? stand_in_format() : format();
  nn::OptimizerState state = out->state_dict();  // handles to its (zero) moments
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < state.tensors.size(); ++i) index[state.tensors[i].first] = i;
  for (int slot = 0; slot < 2; ++slot) {
    for (size_t b = 0; b < layout_.buckets().size(); ++b) {
      const auto& k = layout_.buckets()[b];
      Tensor whole = state_of(slot, int(b));
      if (stage_ > 0 && !views) {
        // Offloaded moments go up first: the collectives take the parameters' device.
        Tensor gathered = empty(Shape{k.numel}, DType::f32, device_);
        dp.all_gather(host_ != nullptr ? ops::to(whole, device_) : whole, gathered);
        whole = gathered;
      }
      for (int p : k.params) {
        const auto& param = layout_.params()[size_t(p)];
        Tensor& dst = state.tensors[index.at(param.name + (slot == 0 ? ".exp_avg" : ".exp_avg_sq"))]
                          .second;
        const Tensor src = ops::reshape(
            ops::narrow(whole, 0, param.offset, param.tensor.numel()), param.tensor.shape());
        if (views)
          dst = src;
        else
          ops::copy_(dst, src);
      }
    }
  }
  state.scalars["step"] = step_;
  state.scalars["lr"] = options_.lr;
  return state;
}

void ZeroAdamW::load_state(const nn::OptimizerState& state) {
  NoGradGuard no_grad;
  std::unique_ptr<nn::AdamW> in = format();
  in->load_state_dict(state);  // validates names, shapes, groups and hyperparameters
  const nn::OptimizerState loaded = in->state_dict();
  for (int slot = 0; slot < 2; ++slot) {
    for (size_t b = 0; b < layout_.buckets().size(); ++b) {
      const int64_t origin = stage_ == 0 ? 0 : rank_ * layout_.shard_numel(int(b));
      const int64_t end =
          stage_ == 0 ? layout_.buckets()[b].numel : origin + layout_.shard_numel(int(b));
      Tensor region = state_of(slot, int(b));
      for (const Segment& seg : layout_.segments(int(b), origin, end)) {
        const auto& param = layout_.params()[size_t(seg.param)];
        Tensor src =
            nn::find_tensor(loaded.tensors, param.name + (slot == 0 ? ".exp_avg" : ".exp_avg_sq"));
        ops::copy_(ops::narrow(region, 0, seg.bucket_offset - origin, seg.length),
                   ops::narrow(ops::reshape(src, {src.numel()}), 0, seg.param_offset, seg.length));
      }
    }
  }
  step_ = in->step_count();
  options_ = in->options();
  options_.lr = in->lr();
}

void ZeroAdamW::load_scalars(const nlohmann::json& scalars) {
  std::unique_ptr<nn::AdamW> in = stand_in_format();  // no moments allocated
  in->load_scalars(scalars);
  step_ = in->step_count();
  options_ = in->options();
  options_.lr = in->lr();
}

int64_t ZeroAdamW::held_bytes() const {
  if (host_ != nullptr) return 0;
  int64_t bytes = 0;
  for (const Tensor& t : m_) bytes += int64_t(t.nbytes());
  for (const Tensor& t : v_) bytes += int64_t(t.nbytes());
  return bytes;
}

int64_t ZeroAdamW::host_bytes() const {
  if (host_ == nullptr) return 0;
  int64_t bytes = 0;
  for (const auto* list : {&m_, &v_, &host_grads_, &rounded_})
    for (const Tensor& t : *list) bytes += int64_t(t.nbytes());
  return bytes;
}

}  // namespace tessera::parallel
