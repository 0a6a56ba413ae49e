#include "tessera/nn/init.h"

#include <cmath>

#include "tessera/core/ops/creation.h"
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
  Generator gen(spec.key, 0);
  return randn(shape, gen, spec.dtype, Device::cpu(), 0.0, spec.std);
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
  return InitSpec{param_key(config->init_seed, prefix + name), std, dtype};
}

}  // namespace tessera::nn
