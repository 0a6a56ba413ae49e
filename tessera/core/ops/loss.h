#pragma once
// Fused cross-entropy: log-softmax and the negative log-likelihood in one pass over the logits;
// probabilities are never stored.
//
// Dtypes: loss, lse and valid are f32 for f32/bf16/f16 logits and f64 for f64 logits, so an f64
// input (gradcheck) is computed in f64 end to end; dlogits has the logits' dtype.

#include <cstdint>

#include "tessera/core/tensor.h"

namespace tessera::ops {

inline constexpr int64_t kIgnoreIndex = -100;

struct CrossEntropyOutput {
  Tensor loss;   // f32 (f64) 0-d: mean over rows whose target is not ignore_index (0 if none)
  Tensor lse;    // f32 (f64) [N]: logsumexp of each row, for the backward pass
  Tensor valid;  // f32 (f64) 0-d: how many rows counted
};
// logits [..., V], targets i32/i64 [...] (logits' leading shape). A target outside [0, V)
// that is not ignore_index throws an Error naming its position.
//
// num_classes (-1: all V) limits the classes to the first num_classes columns, for a
// vocabulary padded up to a round size: only those columns enter the logsumexp, targets must
// be below num_classes, and the padded columns get zero gradient. Contiguous logits are then
// read in place, the first num_classes columns of each row, with no copy.
CrossEntropyOutput cross_entropy_forward(const Tensor& logits, const Tensor& targets,
                                         int64_t ignore_index = kIgnoreIndex,
                                         int64_t num_classes = -1);
// dlogits, shaped like logits, for the 0-d upstream gradient gloss.
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              const Tensor& valid, const Tensor& gloss,
                              int64_t ignore_index = kIgnoreIndex, int64_t num_classes = -1);

}  // namespace tessera::ops
