#pragma once
// FlatLayout: where every parameter lives in the flat buffers of data parallelism, as offset
// arithmetic only (no memory). FlatParams, GradReducer and ZeroAdamW build on it.
//
//  - One flat space per dtype. A space is a row of buckets; a bucket is a run of whole
//    parameters (never split, so a bucket is ready exactly when its parameters' gradients are),
//    padded so it divides into dp equal, 64-byte aligned shards.
//  - Rank r of the dp group owns shard r of EVERY bucket: [r * S, (r + 1) * S) with S = the
//    bucket's numel / dp. Its shard of the whole model is those slices laid end to end (the
//    space's shard buffer). Sharding per bucket, not one cut through the whole space, is what
//    lets a bucket be reduce-scattered as soon as it is ready and lets ZeRO-3 gather one unit.
//  - Buckets follow the backward order: built from the last parameter to the first, so bucket 0
//    (the head) is ready first. With units (ZeRO-3; optional below it) each unit's parameters
//    form its own bucket, so every stage shares one layout and therefore one reduction order.
//  - A tied parameter (its gradient is summed with a copy on another pipeline stage) gets a
//    bucket of its own, so both stages shard it identically.

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/nn/module.h"

namespace tessera::parallel {

// A unit of parameters that ZeRO-3 gathers together ("embedding", "h.0", ..., "head"), named as
// nn::UnitHooks names it. `params` lists every parameter the unit's forward reads; a parameter
// listed by several units (a tied embedding read by the embedding and the head) is stored with
// the first unit that lists it and gathered by each.
struct UnitSpec {
  std::string name;
  std::vector<std::string> params;
};

// The units of an nn::GPT (or one pipeline stage of it) from its parameter names: "embedding"
// (wte, wpe), "h.{i}" (h.{i}.*), "head" (ln_f, lm_head, or wte when the head is tied to it).
// Throws naming any parameter that fits none.
std::vector<UnitSpec> gpt_units(const nn::StateDict& params);

struct LayoutOptions {
  int dp_size = 1;
  int64_t bucket_bytes = int64_t(25) << 20;  // without units; PyTorch DDP's default
  std::vector<UnitSpec> units;               // empty: buckets by size
  std::set<std::string> tied;                // parameters that get a bucket of their own
};

// A piece of one parameter inside one bucket.
struct Segment {
  int param = 0;              // index into FlatLayout::params()
  int64_t param_offset = 0;   // first element, in the parameter's flattened order
  int64_t bucket_offset = 0;  // where it sits in the bucket
  int64_t length = 0;
};

class FlatLayout {
 public:
  // Shards are padded to this many elements (64 bytes of f32) so each starts on a cache line.
  static constexpr int64_t kShardAlign = 16;

  struct Param {
    std::string name;
    Tensor tensor;
    int space = 0;
    int bucket = 0;
    int64_t offset = 0;  // within its bucket
  };
  struct Bucket {
    int space = 0;
    std::vector<int> params;   // in bucket order
    int64_t numel = 0;         // padded: a multiple of dp_size * kShardAlign
    int64_t used = 0;          // elements holding parameters; the rest is zero padding
    int64_t flat_offset = 0;   // in its space's full buffer
    int64_t shard_offset = 0;  // in its space's shard buffer
    std::string unit;          // owning unit; empty without units
    bool tied = false;
  };
  struct Space {
    DType dtype = DType::f32;
    int64_t numel = 0;        // the full buffer
    int64_t shard_numel = 0;  // = numel / dp_size
  };
  struct Unit {
    std::string name;
    std::vector<int> buckets;  // every bucket the unit's forward reads (own and shared)
  };

  // Throws naming the parameter for: an undefined, non-floating or duplicate tensor, a
  // parameter missing from every unit, or a unit listing an unknown name.
  FlatLayout(const nn::StateDict& params, const LayoutOptions& options);

  int dp_size() const { return dp_size_; }
  const std::vector<Param>& params() const { return params_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  const std::vector<Space>& spaces() const { return spaces_; }
  const std::vector<Unit>& units() const { return units_; }
  // The unit named `name`, or -1.
  int find_unit(const std::string& name) const;

  int64_t shard_numel(int bucket) const { return buckets_[size_t(bucket)].numel / dp_size_; }
  // The parameter pieces overlapping [lo, hi) of a bucket, in bucket order (padding skipped).
  std::vector<Segment> segments(int bucket, int64_t lo, int64_t hi) const;
  // The pieces of rank's shard of a bucket.
  std::vector<Segment> shard_segments(int bucket, int rank) const {
    const int64_t s = shard_numel(bucket);
    return segments(bucket, rank * s, (rank + 1) * s);
  }

  // "12 parameters (1234 elements) in 3 buckets, 1 space, dp 4: bucket 0 [h.1] 400 elements..."
  std::string describe() const;

 private:
  void add_bucket(const std::vector<int>& params, const std::string& unit, bool tied);

  int dp_size_;
  std::vector<Param> params_;
  std::vector<Bucket> buckets_;
  std::vector<Space> spaces_;
  std::vector<Unit> units_;
};

}  // namespace tessera::parallel
