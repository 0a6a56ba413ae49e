#pragma once
// Small GPT configs and batches shared by the nn tests.

#include <cstdint>
#include <vector>

#include "tessera/nn/nn.h"
#include "tessera/tessera.h"

namespace tessera::nn::testing {

// GPT-2 style: learned positions, LayerNorm with biases, GELU, tied head. The vocabulary (23)
// is no multiple of vocab_multiple (8), so the table has padded rows.
inline GPTConfig tiny_gpt2(int64_t layers = 2) {
  GPTConfig c;
  c.vocab_size = 23;
  c.vocab_multiple = 8;
  c.block_size = 16;
  c.n_layer = layers;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.n_embd = 16;
  c.init_seed = 7;
  return c;
}

// Llama style: RoPE, RMSNorm, SwiGLU, no biases, untied head, and grouped-query attention
// (4 query heads sharing 2 kv heads).
inline GPTConfig tiny_llama(int64_t layers = 2) {
  GPTConfig c = tiny_gpt2(layers);
  c.n_head = 4;
  c.n_kv_head = 2;
  c.norm = NormKind::rmsnorm;
  c.mlp = MlpKind::swiglu;
  c.position = PositionKind::rope;
  c.tie_embeddings = false;
  c.bias = false;
  return c;
}

// Runs a scope on one thread: a tiny model's ops are too small to split, and on a shared
// machine every parallel region may wait milliseconds for a descheduled thread, which adds up
// over the thousands of forward passes of a gradcheck.
class OneThread {
 public:
  OneThread() : saved_(num_threads()) { set_num_threads(1); }
  ~OneThread() { set_num_threads(saved_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_;
};

// Ids in [0, vocab) from a fixed linear congruential sequence.
inline Tensor token_batch(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> v(static_cast<size_t>(B * T));
  uint64_t x = seed * 2862933555777941757ull + 3037000493ull;
  for (auto& id : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    id = int64_t((x >> 33) % uint64_t(vocab));
  }
  return from_vector<int64_t>(v, Shape{B, T});
}

}  // namespace tessera::nn::testing
