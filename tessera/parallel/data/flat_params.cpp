#include "tessera/parallel/data/flat_params.h"

#include <algorithm>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/backend.h"
#include "tessera/core/empty.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"

namespace tessera::parallel {

namespace {

Tensor flat_view(const std::shared_ptr<Storage>& storage, int64_t offset, int64_t numel,
                 DType dtype) {
  return Tensor(storage, Shape{numel}, Strides{1}, offset, dtype);
}

// Elements [begin, begin + dst.numel()) of a deferred parameter into dst, through host
// chunks of at most 16 MiB when dst is on a device.
void fill_into(const nn::ParamFill& fill, int64_t begin, const Tensor& dst) {
  if (dst.device() == Device::cpu()) return fill(begin, dst);
  const int64_t chunk = (int64_t(16) << 20) / int64_t(dtype_size(dst.dtype()));
  for (int64_t at = 0; at < dst.numel(); at += chunk) {
    const int64_t n = std::min(chunk, dst.numel() - at);
    Tensor host = empty(Shape{n}, dst.dtype(), Device::cpu());
    fill(begin + at, host);
    ops::copy_(ops::narrow(dst, 0, at, n), host);
  }
}

}  // namespace

FlatParams::FlatParams(const FlatLayout& layout, int dp_rank, bool sharded,
                       const HostTransfers* host, const ParamFillLookup& fill_of)
    : layout_(layout), rank_(dp_rank), sharded_(sharded), offloaded_(host != nullptr) {
  TESSERA_CHECK(dp_rank >= 0 && dp_rank < layout.dp_size(), "FlatParams: dp rank ", dp_rank,
                " is outside a group of ", layout.dp_size());
  TESSERA_CHECK(sharded || host == nullptr, "FlatParams: host shards need the sharded layout");
  NoGradGuard no_grad;
  const auto& spaces = layout.spaces();
  const auto& buckets = layout.buckets();
  const Device device = layout.params().front().tensor.device();
  for (const auto& p : layout.params())
    TESSERA_CHECK(p.tensor.device() == device, "FlatParams: parameter '", p.name, "' is ",
                  p.tensor.describe(), " but '", layout.params().front().name, "' is on ", device,
                  "; one data-parallel layout holds the parameters of one device");
  // Sharded, a bucket has memory only while gathered, and the shards (padding zero) are all
  // a rank ever holds, at construction too: each parameter's part is copied, or for a deferred
  // one filled, straight into them.
  if (sharded) {
    gathered_version_.assign(buckets.size(), 0);
    for (const auto& b : buckets)
      storage_.push_back(Storage::unallocated(
          size_t(b.numel) * dtype_size(spaces[size_t(b.space)].dtype), device));
    for (const auto& s : spaces) {
      shards_.push_back(host != nullptr ? host->host_empty(s.shard_numel, s.dtype)
                                        : empty(Shape{s.shard_numel}, s.dtype, device));
      ops::zero_(shards_.back());
    }
  } else {
    for (const auto& s : spaces) {
      storage_.push_back(std::make_shared<Storage>(size_t(s.numel) * dtype_size(s.dtype), device));
      ops::zero_(flat_view(storage_.back(), 0, s.numel, s.dtype));  // the padding
    }
  }
  for (const auto& p : layout.params()) {
    TensorImpl* impl = p.tensor.impl_ptr();
    const int64_t numel = p.tensor.numel();
    nn::ParamFill fill;
    if (impl->storage->never_allocated()) {
      fill = fill_of ? fill_of(p.name) : nn::ParamFill();
      TESSERA_CHECK(fill != nullptr, "FlatParams: parameter '", p.name, "' ", p.tensor.describe(),
                    " is deferred (no memory yet) and nothing says how to fill it (",
                    "DataParallelConfig::param_fill)");
    }
    const auto& b = buckets[size_t(p.bucket)];
    const auto& storage = storage_[size_t(sharded ? p.bucket : b.space)];
    const int64_t offset = (sharded ? 0 : b.flat_offset) + p.offset;
    if (sharded) {
      // This rank's part of the parameter: bucket elements [lo, hi) of its shard.
      const int64_t s = layout.shard_numel(p.bucket), first = rank_ * s;
      const int64_t lo = std::max(p.offset, first), hi = std::min(p.offset + numel, first + s);
      if (lo < hi) {
        const Tensor dst = ops::narrow(shard(p.bucket), 0, lo - first, hi - lo);
        if (fill)
          fill_into(fill, lo - p.offset, dst);
        else
          ops::copy_(dst, ops::narrow(flat_view(impl->storage, impl->offset, numel, impl->dtype), 0,
                                      lo - p.offset, hi - lo));
      }
    } else if (fill) {
      fill_into(fill, 0, flat_view(storage, offset, numel, impl->dtype));
    } else {
      ops::copy_(Tensor(storage, impl->shape, contiguous_strides(impl->shape), offset, impl->dtype),
                 p.tensor);
    }
    impl->storage = storage;
    impl->strides = contiguous_strides(impl->shape);
    impl->offset = offset;
    impl->grad.reset();
  }
  reset_peak();
}

Tensor FlatParams::bucket(int b) const {
  const auto& k = layout_.buckets()[size_t(b)];
  const DType dtype = layout_.spaces()[size_t(k.space)].dtype;
  if (sharded_) return flat_view(storage_[size_t(b)], 0, k.numel, dtype);
  return flat_view(storage_[size_t(k.space)], k.flat_offset, k.numel, dtype);
}

Tensor FlatParams::shard(int b) const {
  const auto& k = layout_.buckets()[size_t(b)];
  const int64_t s = layout_.shard_numel(b);
  if (sharded_) return ops::narrow(shards_[size_t(k.space)], 0, k.shard_offset, s);
  return ops::narrow(bucket(b), 0, rank_ * s, s);
}

void FlatParams::all_gather_shards(Communicator& dp) {
  TESSERA_ASSERT(!sharded_, "all_gather_shards is for unsharded parameters");
  if (dp.size() == 1) return;
  NoGradGuard no_grad;
  // MPI cannot gather from a slice of the output buffer itself, so each shard is copied out.
  std::vector<std::shared_ptr<Work>> works;
  for (size_t b = 0; b < layout_.buckets().size(); ++b)
    works.push_back(dp.all_gather_async(ops::clone(shard(int(b))), bucket(int(b))));
  for (auto& w : works) w->wait();
}

std::shared_ptr<Work> FlatParams::gather_async(int b, Communicator& dp) {
  TESSERA_ASSERT(sharded_, "gather_async is for sharded parameters");
  storage_[size_t(b)]->reallocate();
  gathered_version_[size_t(b)] = storage_[size_t(b)]->version();
  peak_ = std::max(peak_, held_bytes());
  if (offloaded_) {
    // Up from the host first (the collective takes device tensors). Only checkpoints and
    // evaluation gather an offloaded master, so this waits rather than keep the upload alive.
    Tensor up = ops::to(shard(b), bucket(b).device());
    if (dp.size() == 1)
      backend_for(up.device()).copy(up, bucket(b));
    else
      dp.all_gather_async(up, bucket(b))->wait();
    gathered_version_[size_t(b)] = storage_[size_t(b)]->version();
    return std::make_shared<CompletedWork>();
  }
  if (dp.size() == 1) {
    // A plain copy, without the version bump of ops::copy_: the backward pass re-gathers the
    // very values its saved tensors hold, and a bump would make them look overwritten.
    backend_for(shard(b).device()).copy(shard(b), bucket(b));
    return std::make_shared<CompletedWork>();
  }
  return dp.all_gather_async(shard(b), bucket(b));
}

void FlatParams::release(int b) {
  TESSERA_ASSERT(sharded_, "release is for sharded parameters");
  storage_[size_t(b)]->release();
}

void FlatParams::write_back(int b) {
  TESSERA_ASSERT(sharded_, "write_back is for sharded parameters");
  if (storage_[size_t(b)]->version() == gathered_version_[size_t(b)]) return;
  NoGradGuard no_grad;
  const int64_t s = layout_.shard_numel(b);
  ops::copy_(shard(b), ops::narrow(bucket(b), 0, rank_ * s, s));
}

bool FlatParams::gathered(int b) const {
  return !sharded_ || !storage_[size_t(b)]->released();
}

int64_t FlatParams::held_bytes() const {
  int64_t bytes = 0;
  for (const auto& s : storage_)
    if (!s->released()) bytes += int64_t(s->nbytes());
  if (!offloaded_)
    for (const Tensor& t : shards_) bytes += int64_t(t.nbytes());
  return bytes;
}

int64_t FlatParams::host_bytes() const {
  int64_t bytes = 0;
  if (offloaded_)
    for (const Tensor& t : shards_) bytes += int64_t(t.nbytes());
  return bytes;
}

}  // namespace tessera::parallel
