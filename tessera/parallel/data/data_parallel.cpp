#include "tessera/parallel/data/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/empty.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/nn/init.h"
#include "tessera/nn/optim/optimizer.h"

namespace tessera::parallel {

namespace {

// Every rank must lay out the same parameters: compares (count, elements, a hash of names and
// shapes) across the group with one max all-reduce of the values and their negations, so every
// rank sees a mismatch and throws (none is left waiting in a later collective).
void check_same_parameters(const nn::StateDict& params, Communicator& dp) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  auto mix = [&hash](const void* data, size_t n) {
    for (size_t i = 0; i < n; ++i)
      hash = (hash ^ static_cast<const uint8_t*>(data)[i]) * 1099511628211ull;
  };
  int64_t elements = 0;
  for (const auto& [name, p] : params) {
    mix(name.data(), name.size());
    const uint8_t deferred = p.storage()->never_allocated();  // deferred ones skip the broadcast
    mix(&deferred, 1);
    for (int d = 0; d < p.dim(); ++d) {
      int64_t s = p.size(d);
      mix(&s, sizeof(s));
    }
    elements += p.numel();
  }
  const int64_t h = int64_t(hash >> 2);  // non-negative, so its negation is exact
  const int64_t n = int64_t(params.size());
  Tensor v = from_vector<int64_t>({n, elements, h, -n, -elements, -h}, Shape{6});
  dp.all_reduce(v, CommOp::max);
  std::vector<int64_t> got = to_vector<int64_t>(v);
  TESSERA_CHECK(got[0] == -got[3] && got[1] == -got[4] && got[2] == -got[5],
                "DataParallel: the ranks of group ", dp.name(), " hold different parameters (",
                "this rank: ", n, " tensors, ", elements, " elements; the group spans ", -got[3],
                "..", got[0], " tensors, ", -got[4], "..", got[1],
                " elements, or names, shapes or which are deferred differ)");
}

}  // namespace

DataParallel::DataParallel(const nn::StateDict& params, Communicator& dp, DataParallelConfig config)
    : config_(std::move(config)), dp_(&dp) {
  TESSERA_CHECK(config_.zero_stage >= 0 && config_.zero_stage <= 3,
                "DataParallel: ZeRO stage must be 0, 1, 2 or 3, got ", config_.zero_stage);
  TESSERA_CHECK(config_.zero_stage < 3 || !config_.units.empty(),
                "DataParallel: ZeRO-3 gathers parameters per unit; pass the model's units ",
                "(gpt_units(model.named_parameters()) for nn::GPT)");
  TESSERA_CHECK(config_.tied.empty() || config_.tied_group != nullptr,
                "DataParallel: tied parameters need the group to sum them over (tied_group)");
  TESSERA_CHECK(!config_.compression.compressing() || dp_->size() > 1,
                "DataParallel: gradient compression ", config_.compression.describe(),
                " on group ", dp_->name(), " of one rank: there is no reduction to compress");
  TESSERA_CHECK(!config_.offload_optimizer || config_.zero_stage >= 1,
                "DataParallel: optimizer offload updates this rank's shard in host memory; ZeRO ",
                "stage 0 keeps the whole state on every rank (use ZeRO 1, 2 or 3)");
  TESSERA_CHECK(!config_.offload_optimizer || config_.compute_dtype == DType::bf16 ||
                    config_.compute_dtype == DType::f16,
                "DataParallel: optimizer offload streams the updated parameters back in bf16 or ",
                "f16, got compute dtype ", dtype_name(config_.compute_dtype));
  NoGradGuard no_grad;
  check_same_parameters(params, *dp_);
  // Rank 0's values win, as in PyTorch DDP (keyed init makes them equal anyway); a deferred
  // parameter has no values yet, and its fill is the same on every rank.
  for (const auto& [name, p] : params) {
    TESSERA_CHECK(p.is_contiguous(), "DataParallel: parameter '", name, "' (", p.describe(),
                  ") must be contiguous");
    if (!p.storage()->never_allocated()) dp_->broadcast(p, 0);
  }
  LayoutOptions lo;
  lo.dp_size = dp_->size();
  lo.bucket_bytes = config_.bucket_bytes;
  lo.units = config_.units;
  lo.tied = config_.tied;
  layout_ = std::make_unique<FlatLayout>(params, lo);
  const int stage = config_.zero_stage;
  if (config_.offload_optimizer)
    host_ = std::make_unique<HostTransfers>(layout_->params().front().tensor.device());
  params_ =
      std::make_unique<FlatParams>(*layout_, dp_->rank(), stage == 3 || config_.offload_optimizer,
                                   host_.get(), config_.param_fill);
  reducer_ = std::make_unique<GradReducer>(*layout_, stage, *dp_, config_.tied_group,
                                           config_.compression, config_.overlap);
  optimizer_ = std::make_unique<ZeroAdamW>(*layout_, stage, dp_->rank(), config_.adamw, host_.get(),
                                           config_.compute_dtype);
  // Offloaded, each bucket's gradient starts down as soon as its reduction is queued (over
  // NCCL) or seen complete, while backward goes on, instead of after it.
  if (config_.offload_optimizer)
    reducer_->set_shard_ready_hook([this](int b, bool after_compute) {
      optimizer_->download_grad(*reducer_, b, after_compute);
    });
  if (stage == 3)
    hooks_ = std::make_shared<Zero3Hooks>(*layout_, *params_, *dp_, config_.zero3_prefetch);
  if (!config_.compute.empty()) {
    TESSERA_CHECK(stage == 3, "DataParallel: a sharded compute copy is for ZeRO-3 (stage ", stage,
                  " keeps the compute copy whole)");
    TESSERA_CHECK(config_.compute.size() == params.size(), "DataParallel: ", config_.compute.size(),
                  " compute parameters for ", params.size(), " master parameters");
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& c = config_.compute[i].second;
      TESSERA_CHECK(config_.compute[i].first == params[i].first && c.defined() &&
                        c.dtype() == config_.compute_dtype && c.shape() == params[i].second.shape(),
                    "DataParallel: compute parameter ", i, " is '", config_.compute[i].first, "' ",
                    c.defined() ? c.describe() : std::string("undefined"), "; expected '",
                    params[i].first, "' in ", dtype_name(config_.compute_dtype), " shaped ",
                    params[i].second.shape().to_string());
    }
    compute_layout_ = std::make_unique<FlatLayout>(config_.compute, lo);
    // Same names, shapes, units and padding rule: every bucket matches the master's element for
    // element, so a compute shard is exactly its master shard rounded.
    for (size_t b = 0; b < layout_->buckets().size(); ++b)
      TESSERA_ASSERT(
          compute_layout_->buckets()[b].numel == layout_->buckets()[b].numel &&
              compute_layout_->buckets()[b].shard_offset == layout_->buckets()[b].shard_offset,
          "the compute layout's bucket ", b, " differs from the master's");
    compute_params_ =
        std::make_unique<FlatParams>(*compute_layout_, dp_->rank(), true, nullptr,
                                     [](const std::string&) { return nn::constant_fill(0.0); });
    compute_hooks_ = std::make_shared<Zero3Hooks>(*compute_layout_, *compute_params_, *dp_,
                                                  config_.zero3_prefetch);
  }
  const int tp_rank = config_.tp != nullptr ? config_.tp->rank() : 0;
  for (const auto& p : layout_->params())
    counted_.push_back(
        counts_in_norm(config_.param_meta ? config_.param_meta(p.name) : nn::ParamMeta{}, tp_rank));
}

DataParallel::~DataParallel() = default;

void DataParallel::set_sync(bool sync) {
  reducer_->set_step(optimizer_->step_count());
  reducer_->set_sync(sync);
}

void DataParallel::backward(const Tensor& loss, bool sync) {
  set_sync(sync);
  loss.backward();
  finish();
}

void DataParallel::finish() {
  reducer_->finish();
  if (hooks_) hooks_->finish();
  if (compute_hooks_) compute_hooks_->finish();
}

std::vector<Tensor> DataParallel::norm_pieces() const {
  // This rank's shard of each bucket, cut at parameter boundaries so each piece can be counted
  // or not, and ordered as nn::AdamW's groups list the parameters (dim >= 2 first, then the
  // rest, each in registration order): at dp 1 this is exactly nn::clip_and_step's list.
  struct Piece {
    bool no_decay;
    int param;
    int64_t offset;
    Tensor t;
  };
  std::vector<Piece> pieces;
  const int rank = dp_->rank();
  for (size_t b = 0; b < layout_->buckets().size(); ++b) {
    const Tensor shard = reducer_->shard_grad(int(b));
    const int64_t origin = rank * layout_->shard_numel(int(b));
    for (const Segment& s : layout_->shard_segments(int(b), rank))
      if (counted_[size_t(s.param)])
        pieces.push_back({layout_->params()[size_t(s.param)].tensor.dim() < 2, s.param,
                          s.param_offset,
                          ops::narrow(shard, 0, s.bucket_offset - origin, s.length)});
  }
  std::sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) {
    return std::tie(a.no_decay, a.param, a.offset) < std::tie(b.no_decay, b.param, b.offset);
  });
  std::vector<Tensor> out;
  for (Piece& p : pieces) out.push_back(std::move(p.t));
  return out;
}

GradNorm DataParallel::grad_norm() {
  std::vector<Communicator*> groups{dp_, config_.tp};
  groups.insert(groups.end(), config_.norm_groups.begin(), config_.norm_groups.end());
  return global_grad_norm(norm_pieces(), groups);
}

StepResult DataParallel::step(double grad_scale) {
  TESSERA_CHECK(std::isfinite(grad_scale) && grad_scale > 0, "DataParallel::step: grad_scale ",
                "must be finite and positive, got ", grad_scale);
  StepResult r;
  if (hooks_) hooks_->end_step();  // before the shards change: unused prefetches go
  if (compute_hooks_) compute_hooks_->end_step();
  GradNorm norm = grad_norm();
  r.grad_norm = norm.norm * grad_scale;
  r.finite = norm.finite;
  if (!r.finite) return r;
  r.clip = nn::clip_factor(r.grad_norm, config_.max_grad_norm);
  optimizer_->step(*params_, *reducer_, r.clip * grad_scale);
  // Offloaded, the master stays sharded on the host; gather_rounded fills the compute copy.
  if ((config_.zero_stage == 1 || config_.zero_stage == 2) && !params_->sharded())
    params_->all_gather_shards(*dp_);
  if (hooks_) hooks_->refresh();  // buckets gathered across the step show the update
  return r;
}

void DataParallel::zero_grad() {
  optimizer_->drop_downloads();  // a skipped step's, before the gradients they read are zeroed
  reducer_->zero_grad();
}

void DataParallel::gather_parameters() {
  if (hooks_) return hooks_->gather_all();
  if (!params_->offloaded() || all_gathered_) return;
  for (size_t b = 0; b < layout_->buckets().size(); ++b)
    params_->gather_async(int(b), *dp_)->wait();
  all_gathered_ = true;
}

void DataParallel::release_parameters() {
  if (hooks_) return hooks_->release_all();
  if (!all_gathered_) return;
  for (size_t b = 0; b < layout_->buckets().size(); ++b) {
    params_->write_back(int(b));
    params_->release(int(b));
  }
  all_gathered_ = false;
}

void DataParallel::gather_compute_parameters() {
  if (compute_hooks_) compute_hooks_->gather_all();
}

void DataParallel::release_compute_parameters() {
  if (compute_hooks_) compute_hooks_->release_all();
}

void DataParallel::gather_rounded(const nn::StateDict& compute) {
  TESSERA_CHECK(offloaded(), "DataParallel::gather_rounded: the optimizer is not offloaded");
  TESSERA_CHECK(compute.size() == layout_->params().size(),
                "DataParallel::gather_rounded: ", compute.size(),
                " compute parameters for a layout of ", layout_->params().size());
  NoGradGuard no_grad;
  const Device device = layout_->params().front().tensor.device();
  for (size_t b = 0; b < layout_->buckets().size(); ++b) {
    const auto& k = layout_->buckets()[b];
    // Up on the communication stream, the host going on to the next bucket: the all-gather
    // queued after the upload there sees it, and one rank's compute stream waits for it.
    const Tensor host = optimizer_->rounded_shard(*params_, int(b));
    Tensor shard = empty(host.shape(), host.dtype(), device);
    host_->upload(host, shard);
    Tensor whole = shard;
    if (dp_->size() > 1) {
      whole = empty(Shape{k.numel}, config_.compute_dtype, device);
      dp_->all_gather(shard, whole);
    } else {
      host_->end_uploads();
    }
    for (int p : k.params) {
      const auto& param = layout_->params()[size_t(p)];
      const Tensor& dst = nn::find_tensor(compute, param.name);
      TESSERA_CHECK(dst.defined() && dst.dtype() == config_.compute_dtype &&
                        dst.shape() == param.tensor.shape() && dst.device() == device,
                    "DataParallel::gather_rounded: compute parameter '", param.name, "' is ",
                    dst.defined() ? dst.describe() : std::string("missing"), "; expected ",
                    dtype_name(config_.compute_dtype), " ", param.tensor.shape().to_string(),
                    " on ", device);
      ops::copy_(dst, ops::reshape(ops::narrow(whole, 0, param.offset, param.tensor.numel()),
                                   param.tensor.shape()));
    }
  }
}

void DataParallel::sync_compute_shards() {
  TESSERA_CHECK(shards_compute(), "DataParallel::sync_compute_shards: no sharded compute copy");
  NoGradGuard no_grad;
  for (size_t b = 0; b < layout_->buckets().size(); ++b) {
    const Tensor shard = compute_params_->shard(int(b));
    if (params_->offloaded())
      host_->upload(optimizer_->rounded_shard(*params_, int(b)), shard);  // up from the host
    else
      ops::copy_(shard, params_->shard(int(b)));  // rounded to nearest even, as a gather-then-round
  }
  if (params_->offloaded()) host_->end_uploads();  // before the compute stream reads a shard
  compute_hooks_->refresh();
}

MemoryStats DataParallel::memory() const {
  MemoryStats m{params_->held_bytes(), reducer_->held_bytes(), optimizer_->held_bytes(),
                std::max(params_->peak_bytes(), params_->held_bytes())};
  m.offloaded = params_->host_bytes() + optimizer_->host_bytes();
  if (compute_params_) {
    m.compute = compute_params_->held_bytes();
    m.compute_peak = std::max(compute_params_->peak_bytes(), m.compute);
  }
  return m;
}

}  // namespace tessera::parallel
