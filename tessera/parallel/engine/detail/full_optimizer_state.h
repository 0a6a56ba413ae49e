#pragma once
// The AdamW state of a GPT split over dp x pp x tp, in the single-process format, and its
// inverse: what nn::AdamW(nn::GPT(config).named_parameters(), options).state_dict() holds
// (tensors "<parameter>.exp_avg" and ".exp_avg_sq" with the single-process shapes, scalars
// kind, step, lr, hyperparameters and the decay / no_decay groups listing the parameters in
// the model's order). So a checkpoint's optimizer state, written under any layout or by one
// process, resumes under any other.
//
// Gathering: DataParallel gathers each moment over dp (ZeroAdamW::gather_state, as this
// rank's tensor-parallel shards), then the moments travel as the weights do
// (gather_parameter_tensors): over tp, split by each parameter's ParamMeta, the padded
// vocabulary rows cut off; over pp from the rank holding each stage, the last stage's tied
// copy of wte.weight left out (its moments equal the first stage's: the tied gradients are
// summed between the two before every update).
//
// Scattering: every rank takes its slices (nn::shard_of, zero rows for the vocabulary
// padding, which never has a gradient), the tied copy those of wte.weight, and DataParallel
// keeps its ZeRO shard of them.

#include <memory>
#include <vector>

#include "tessera/nn/gpt.h"
#include "tessera/nn/optim/optimizer.h"
#include "tessera/parallel/data/data_parallel.h"
#include "tessera/parallel/mesh.h"

namespace tessera::parallel {

// chunks[c] is model stage c * pp + pp_rank, holding the parameters `dp` updates. The
// result is on every rank (twice the model's size while it lives). Collective over the
// mesh's dp, tp and pp groups.
nn::OptimizerState gather_optimizer_state(const std::vector<std::shared_ptr<nn::GPT>>& chunks,
                                          const DeviceMesh& mesh, const DataParallel& dp);

// Loads a single-process AdamW state. Every rank checks all of it first (the moments' names
// and shapes against the whole model, learned over pp, then the scalars as nn::AdamW does), so
// a bad state throws on every rank alike, naming the tensor or field, and changes nothing.
// Collective over the mesh's pp group.
void load_optimizer_state(const std::vector<std::shared_ptr<nn::GPT>>& chunks,
                          const DeviceMesh& mesh, DataParallel& dp, const nn::OptimizerState& full);

// Throws unless `scalars` are a single-process AdamW's: another optimizer's state (an SGD run
// resumed with AdamW) is named as such before anything else is checked.
void check_adamw_kind(const nlohmann::json& scalars);

// Only the scalars of a single-process AdamW state (checked as above), for a rank that filled
// its moments from a sharded checkpoint itself. Local.
void load_optimizer_scalars(DataParallel& dp, const nlohmann::json& full_scalars);

}  // namespace tessera::parallel
