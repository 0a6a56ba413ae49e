#pragma once
// Between a tensor-parallel model's shards and the single-process model's full tensors: gather
// them (for checkpoints and for comparing with one process) and load full tensors into shards.
// The split of each parameter comes from its ParamMeta (nn/model_parallel.h); the full tensor
// has the single-process shape, so a checkpoint gathered under one layout loads into any other.

#include <memory>

#include "tessera/core/tensor.h"
#include "tessera/nn/io/sharded_checkpoint.h"
#include "tessera/nn/io/tensor_source.h"
#include "tessera/nn/model_parallel.h"
#include "tessera/nn/module.h"
#include "tessera/parallel/comm/communicator.h"

namespace tessera::parallel::tp {

// The full tensor of a parameter split as `meta`, from every rank's shard `local` (the same
// shape on every rank). Collective over the tensor-parallel group; every rank gets the result.
// A replicated tensor is returned as a copy.
Tensor gather_full(const Tensor& local, const nn::ParamMeta& meta, Communicator& group);

// Every parameter and buffer of `model`, full, in state_dict() order. Collective.
nn::StateDict gather_full_state_dict(const nn::Module& model, Communicator& group);
// The full gradient of every parameter that has one (the same on every rank, as gradients
// are), in named_parameters() order. Collective.
nn::StateDict gather_full_grads(const nn::Module& model, Communicator& group);

// Loads a single-process (full) state dict into a tensor-parallel model: each rank copies its
// slices (nn::shard_of). Strictness and error messages as Module::load_state_dict. Local: no
// communication.
void load_full_state_dict(nn::Module& model, const nn::StateDict& full, int rank, int size,
                          bool strict = true);

// Reads every parameter and buffer of a tensor-parallel model from the full (single-process)
// tensors of `source` (a checkpoint's file, Hugging Face Llama shards), each rank only its
// slices, straight into its own tensors (nn::source_fill): no rank holds a full tensor, and the
// load's memory is the rank's model. With size 1 it reads a whole model in place. Strict: every
// tensor of the model must be in the source and every tensor of the source in the model,
// shaped as shard_of would take it. The model's tensors must be contiguous on the CPU. Local:
// no communication.
void read_full_source(nn::Module& model, const std::shared_ptr<const nn::TensorSource>& source,
                      int rank, int size);
// The same from a sharded set (written under any layout): each rank reads its slices of the
// model's tensors from whichever shards hold them (nn::read_pieces). Strict as above; the
// set's optimizer tensors are not read.
void read_full_sharded_set(nn::Module& model, const nn::ShardedSet& set, int rank, int size);

}  // namespace tessera::parallel::tp
