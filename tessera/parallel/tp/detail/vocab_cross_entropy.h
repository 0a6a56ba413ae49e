#pragma once
// Vocab-parallel cross-entropy (Megatron): each rank holds the logits of its vocabulary slice,
// and the loss is computed without ever gathering the full logits.
//
// For each row, with this rank's real classes x_j (its slice, cut at num_classes):
//   m   = all-reduce max of max_j x_j                       (the stable shift)
//   s   = all-reduce sum of sum_j exp(x_j - m)
//   z   = all-reduce sum of the target's logit (only its owner contributes it)
//   row loss = m + log(s) - z,   loss = mean over rows whose target is not ignore_index
// The backward pass is local: d x_j = (exp(x_j - lse) - [j is the target]) * g / valid, and
// zero for padded classes and ignored rows. Three all-reduces of [N] per forward pass, none
// in the backward pass; everything else is memory-bound passes over the local logits.

#include <cstdint>
#include <memory>

#include "tessera/core/tensor.h"
#include "tessera/parallel/comm/communicator.h"

namespace tessera::parallel::tp {

// logits_shard [..., V_local] (f32, f64, bf16 or f16): columns [vocab_start, vocab_start +
// V_local) of the full logits; columns from num_classes on are padding. targets i32/i64
// shaped like the leading dims, the same on every rank, each in [0, num_classes) or
// ignore_index (a bad target throws naming its position and value). Returns the 0-d mean loss
// (f32, or f64 for f64 logits), equal on every rank; 0 when every target is ignored.
// Collective over `group`.
Tensor vocab_parallel_cross_entropy(const Tensor& logits_shard, const Tensor& targets,
                                    int64_t vocab_start, int64_t num_classes,
                                    int64_t ignore_index,
                                    const std::shared_ptr<Communicator>& group);

}  // namespace tessera::parallel::tp
