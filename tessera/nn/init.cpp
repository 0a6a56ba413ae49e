#include "tessera/nn/init.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tessera/core/backend.h"
#include "tessera/core/empty.h"
#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"

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

ParamFill normal_fill(const Shape& full_shape, const InitSpec& spec, const ParamMeta& meta,
                      int rank, int size, const std::string& what) {
  const ShardMap map(full_shape, meta, rank, size, what);
  if (spec.init == ParamInit::zeros) return constant_fill(0.0);
  TESSERA_CHECK(spec.zero_rows_from < 0 || full_shape.size() == 2, "normal_fill: '", what, "' ",
                full_shape, " zeroes rows from ", spec.zero_rows_from, " but is not a matrix");
  // From this full position on, the rows are zero.
  const int64_t zero_from = spec.zero_rows_from < 0 ? std::numeric_limits<int64_t>::max()
                                                    : spec.zero_rows_from * full_shape.back();
  return [=](int64_t begin, const Tensor& out) {
    TESSERA_CHECK(out.defined() && out.dim() == 1 && out.is_contiguous() &&
                      out.device() == Device::cpu() && out.dtype() == spec.dtype,
                  "normal_fill: '", what, "' fills a contiguous 1-D CPU ", dtype_name(spec.dtype),
                  " tensor, got ", out.defined() ? out.describe() : std::string("undefined"));
    // Each run is consecutive in the key's stream: drawn there, zero past zero_from.
    map.for_each_run(begin, begin + out.numel(), [&](int64_t local, int64_t full, int64_t n) {
      const int64_t drawn = std::clamp<int64_t>(zero_from - full, 0, n);
      const Tensor dst = ops::narrow(out, 0, local - begin, n);
      if (drawn > 0)
        backend_for(Device::cpu())
            .random_normal(ops::narrow(dst, 0, 0, drawn), 0.0, spec.std, spec.key, uint64_t(full));
      if (drawn < n) ops::zero_(ops::narrow(dst, 0, drawn, n - drawn));
    });
  };
}

ParamFill constant_fill(double value) {
  return [value](int64_t, const Tensor& out) { ops::fill_(out, value); };
}

Tensor materialize(const Shape& shape, DType dtype, const ParamFill& fill) {
  Tensor t = empty(shape, dtype, Device::cpu());
  fill(0, ops::view(t, Shape{t.numel()}));
  return t;
}

WeightInit init_weight(const Shape& full_shape, const InitSpec& spec, const ParamMeta& meta,
                       int rank, int size, const std::string& what) {
  const Shape local = ShardMap(full_shape, meta, rank, size, what).local_shape();
  ParamFill fill = normal_fill(full_shape, spec, meta, rank, size, what);
  if (spec.defer) return {unallocated(local, spec.dtype, Device::cpu()), std::move(fill)};
  return {materialize(local, spec.dtype, fill), ParamFill()};
}

Tensor init_normal(const Shape& shape, const InitSpec& spec) {
  return materialize(shape, spec.dtype, normal_fill(shape, spec, ParamMeta{}, 0, 1, "init_normal"));
}

Tensor init_normal_shard(const Shape& full_shape, const InitSpec& spec, const ParamMeta& meta,
                         int rank, int size, const std::string& what) {
  InitSpec held = spec;
  held.defer = false;
  return init_weight(full_shape, held, meta, rank, size, what).value;
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
  InitSpec spec{param_key(config->init_seed, prefix + name), std, dtype, init_mode};
  spec.defer = defer;
  return spec;
}

}  // namespace tessera::nn
