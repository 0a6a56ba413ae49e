#pragma once
// Generator: a (seed, offset) pair over the Philox stream. Each draw of n values takes stream
// positions [offset, offset + n) and advances the offset, so saving and restoring the pair
// reproduces every later draw exactly (checkpoint recompute, resumed runs).

#include <cstdint>

namespace tessera {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t offset = 0) : seed_(seed), offset_(offset) {}

  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves n stream positions and returns the first.
  uint64_t advance(uint64_t n) {
    uint64_t start = offset_;
    offset_ += n;
    return start;
  }

 private:
  uint64_t seed_;
  uint64_t offset_;
};

// A per-thread default generator (seed 0), used when an op is not handed one.
Generator& default_generator();

}  // namespace tessera
