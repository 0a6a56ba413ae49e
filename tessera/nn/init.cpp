#include "tessera/nn/init.h"

#include <cmath>

#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/random.h"

namespace tessera::nn {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t mix_key(std::initializer_list<uint64_t> parts) {
  uint64_t h = 0;
  for (uint64_t p : parts) h = splitmix64(h ^ p);
  return h;
}

uint64_t param_key(uint64_t init_seed, std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a, 64-bit
  for (char c : name) {
    h ^= uint64_t(static_cast<unsigned char>(c));
    h *= 0x100000001B3ull;
  }
  return mix_key({init_seed, h});
}

Tensor init_normal(const Shape& shape, const InitSpec& spec) {
  if (spec.init == ParamInit::zeros) return zeros(shape, spec.dtype, Device::cpu());
  Generator gen(spec.key, 0);
  return randn(shape, gen, spec.dtype, Device::cpu(), 0.0, spec.std);
}

Tensor shard_of(const Tensor& full, const ParamMeta& meta, int rank, int size,
                const std::string& what) {
  TESSERA_CHECK(full.defined(), "shard_of: '", what, "' is undefined");
  TESSERA_CHECK(size >= 1 && rank >= 0 && rank < size, "shard_of: rank ", rank,
                " is outside a tensor-parallel group of ", size);
  if (meta.shard == ShardKind::replicated) return ops::clone(full);
  const int64_t dim = meta.shard == ShardKind::rows ? 0 : 1;
  TESSERA_CHECK(full.dim() > dim, "shard_of: '", what, "' ", full.describe(),
                " has no dim ", dim, " to split");
  int64_t length = 0;
  for (int64_t s : meta.segments) {
    TESSERA_CHECK(s > 0 && s % size == 0, "shard_of: '", what, "' has a segment of ", s,
                  " along dim ", dim, ", which does not split evenly over ", size, " ranks");
    length += s;
  }
  std::vector<int64_t> segments = meta.segments;
  if (segments.empty()) {
    length = full.size(dim);
    TESSERA_CHECK(length % size == 0, "shard_of: '", what, "' ", full.describe(), " dim ", dim,
                  " (", length, ") does not split evenly over ", size, " ranks");
    segments = {length};
  }
  Tensor src = full;
  if (full.size(dim) != length) {
    TESSERA_CHECK(full.size(dim) == meta.unpadded_size && meta.unpadded_size < length,
                  "shard_of: '", what, "' ", full.describe(), " has ", full.size(dim),
                  " along dim ", dim, "; expected ", length,
                  meta.unpadded_size > 0 ? str_cat(" (or ", meta.unpadded_size, " unpadded)") : "");
    Shape padded = full.shape();
    padded[int(dim)] = length;
    src = zeros(padded, full.dtype(), full.device());
    ops::copy_(ops::narrow(src, dim, 0, full.size(dim)), full);
  }
  std::vector<Tensor> parts;
  int64_t start = 0;
  for (int64_t s : segments) {
    const int64_t part = s / size;
    parts.push_back(ops::narrow(src, dim, start + rank * part, part));
    start += s;
  }
  return parts.size() == 1 ? ops::clone(parts[0]) : ops::cat(parts, dim);
}

double residual_init_std(const GPTConfig& config) {
  return kInitStd / std::sqrt(2.0 * double(config.n_layer));
}

LayerContext LayerContext::child(const std::string& name) const {
  LayerContext c = *this;
  c.prefix += name + ".";
  return c;
}

InitSpec LayerContext::init(const std::string& name, double std) const {
  return InitSpec{param_key(config->init_seed, prefix + name), std, dtype, init_mode};
}

}  // namespace tessera::nn
