#pragma once
// FlatParams: a model's parameters moved into the flat buffers of a FlatLayout.
//
// Each parameter's TensorImpl is re-pointed at its place in flat storage (values kept), so the
// module, the optimizer and every other holder of the handle see the flat memory without
// knowing it. Views taken of a parameter before the move keep the old memory.
//
// Unsharded (ZeRO 0-2): one storage per dtype space holds every bucket; a rank's shard of a
// bucket is a slice of it. Sharded (ZeRO-3): one storage per bucket, released except while
// gathered, plus one shard buffer per space that holds this rank's slices between uses.
// Offloaded (an optimizer in host memory, host_transfers.h): sharded, with the shard buffers in
// host memory, so the device holds none of these parameters except while gathered.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/nn/module.h"
#include "tessera/parallel/comm/communicator.h"
#include "tessera/parallel/data/flat_layout.h"
#include "tessera/parallel/data/host_transfers.h"

namespace tessera::parallel {

// The fill of a deferred parameter (nn::ModelParallel::defer_parameters) by its name.
using ParamFillLookup = std::function<nn::ParamFill(const std::string& name)>;

class FlatParams {
 public:
  // Moves the layout's parameters into flat storage; with `sharded`, keeps only dp_rank's shard
  // of each bucket and frees the rest. Drops any gradient the parameters held. With `host`
  // (sharded only), the shards live in its host buffers. A deferred parameter (no memory yet)
  // is filled in place by fill_of(its name), only the part this rank keeps: sharded, the
  // rank never holds more than its shards, not even while building them.
  FlatParams(const FlatLayout& layout, int dp_rank, bool sharded,
             const HostTransfers* host = nullptr, const ParamFillLookup& fill_of = {});

  bool sharded() const { return sharded_; }
  bool offloaded() const { return offloaded_; }
  // Bucket b's parameters, [numel] (sharded: readable only while gathered).
  Tensor bucket(int b) const;
  // This rank's shard of bucket b, [numel / dp].
  Tensor shard(int b) const;

  // Unsharded: after each rank updated its shard, every rank all-gathers the full buckets.
  void all_gather_shards(Communicator& dp);

  // Sharded only: fresh memory for bucket b, filled by an all-gather of every rank's shard.
  std::shared_ptr<Work> gather_async(int b, Communicator& dp);
  // Sharded only: frees bucket b's memory (the parameters' handles stay; reads throw).
  void release(int b);
  // Sharded only: if gathered bucket b was written since it was gathered (a checkpoint loaded
  // into the module: ops writes bump the storage version, gathers do not), copies this rank's
  // slice of it back into the shard.
  void write_back(int b);
  bool gathered(int b) const;

  // Parameter memory this rank holds now on the parameters' device, and the most it held since
  // reset_peak(), in bytes; and what it holds in host memory (offloaded shards).
  int64_t held_bytes() const;
  int64_t host_bytes() const;
  int64_t peak_bytes() const { return peak_; }
  void reset_peak() { peak_ = held_bytes(); }

 private:
  const FlatLayout& layout_;
  int rank_;
  bool sharded_;
  bool offloaded_ = false;
  std::vector<std::shared_ptr<Storage>> storage_;  // per space, or per bucket when sharded
  std::vector<Tensor> shards_;                     // per space, sharded only
  std::vector<uint64_t> gathered_version_;         // per bucket, sharded only
  int64_t peak_ = 0;
};

}  // namespace tessera::parallel
