#pragma once
// The global gradient norm over every parameter of the model, however it is split across the
// data-, tensor- and pipeline-parallel groups, with every element counted exactly once:
//  - a ZeRO-sharded gradient counts on the rank that owns the shard (each rank passes only
//    its shards' pieces);
//  - a tensor-parallel sharded parameter (ParamMeta rows/cols) counts on every tp rank, each
//    holding a different slice;
//  - a tp-replicated parameter counts on tp rank 0 only (not divided by tp, which would round);
//  - a tied copy (the last pipeline stage's embedding) does not count: its original does.
// Each rank sums the squares of the pieces it counts, and the partial sums are added over each
// group in turn (f64 on the wire). A non-finite gradient anywhere makes the norm non-finite
// everywhere, which is the loss-scale overflow check; clipping (nn::clip_factor) uses the same
// number.

#include <functional>
#include <string>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/nn/model_parallel.h"
#include "tessera/nn/module.h"
#include "tessera/parallel/comm/communicator.h"

namespace tessera::parallel {

struct GradNorm {
  double norm = 0.0;
  bool finite = true;  // false: some gradient holds an inf or NaN (skip the step)
};

// Whether a tensor-parallel rank counts a parameter's gradient in the global norm.
bool counts_in_norm(const nn::ParamMeta& meta, int tp_rank);

// sqrt(sum over groups of sum over pieces of sum(x^2)). `pieces` are this rank's counted
// gradient pieces, in a fixed order (the same order on every run gives the same bits);
// `groups` are the communicators to sum over (null entries are skipped). Collective over
// every group.
GradNorm global_grad_norm(const std::vector<Tensor>& pieces,
                          const std::vector<Communicator*>& groups);

// For models without DataParallel: the gradients of `params` (missing ones count as zero),
// each counted by counts_in_norm(meta(name), tp rank), summed over tp and then `groups`.
GradNorm global_grad_norm(const nn::StateDict& params,
                          const std::function<nn::ParamMeta(const std::string&)>& meta,
                          Communicator* tp, const std::vector<Communicator*>& groups);

}  // namespace tessera::parallel
