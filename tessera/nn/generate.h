#pragma once
// Text generation: a decode loop over the KV cache, with temperature, top-k and top-p
// (nucleus) sampling from a seeded Philox stream, or greedy decoding at temperature 0.

#include <cstdint>
#include <functional>
#include <span>

#include "tessera/core/tensor.h"
#include "tessera/nn/gpt.h"

namespace tessera::nn {

struct SamplingOptions {
  double temperature = 1.0;  // 0: greedy (the first argmax)
  int64_t top_k = 0;         // keep the k most likely tokens; 0: all
  double top_p = 1.0;        // keep the fewest most likely tokens whose probability >= top_p
  uint64_t seed = 0;         // the Philox key of the sampling stream
  // Throws naming the offending field.
  void validate() const;
};

// Picks a token from one row of logits (the real vocabulary only) with the uniform draw u in
// [0, 1). Ties in ranking go to the lower id, so the result is a pure function of the inputs.
int64_t sample_token(std::span<const float> logits, const SamplingOptions& options, double u);

// The uniform draw of sequence `row` at decode step `step`: Philox position
// step * batch + row of the seed's stream, 53 bits.
double sampling_uniform(uint64_t seed, int64_t step, int64_t batch, int64_t row);

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  SamplingOptions sampling;
  // false recomputes the whole sequence for every token (the reference the cache must match).
  bool use_cache = true;
  // Called after every decode step with the B tokens just chosen; returning false ends the
  // generation there (an end-of-text token, a stop string). Empty: never stops early.
  std::function<bool(int64_t step, std::span<const int64_t> chosen)> on_step;
};

// Extends every row of prompt [B, T0] (ids in [0, vocab_size)) by max_new_tokens tokens and
// returns [B, T0 + n] i64 on the CPU, n = max_new_tokens unless on_step stopped it sooner.
// T0 + max_new_tokens must fit in block_size. The model may live on any device (the prompt
// and the KV cache go to its device). Runs under NoGradGuard with dropout off; the model's
// train/eval mode is restored afterwards.
Tensor generate(GPT& model, const Tensor& prompt, const GenerateOptions& options);

}  // namespace tessera::nn
