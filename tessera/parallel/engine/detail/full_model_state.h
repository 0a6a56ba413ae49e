#pragma once
// The single-process state dict of a GPT split over a pipeline and tensor parallelism, and
// its inverse: the bridge that lets a checkpoint written under one layout load under any other.
//
// Gathering: each model stage's chunk is gathered over its tp group (tp/full_state.h), then
// broadcast over the pp group from the rank that holds it, in model-stage order, so the
// result lists the names in nn::GPT(config)'s order on every rank. The last stage's tied copy
// of wte.weight is left out (the first stage's is the one). The parameters must be readable
// (at ZeRO-3, gathered: DataParallel::gather_parameters()).

#include <memory>
#include <string>
#include <vector>

#include "tessera/nn/gpt.h"
#include "tessera/nn/io/tensor_source.h"
#include "tessera/parallel/mesh.h"

namespace tessera::parallel {

// chunks[c] is model stage c * pp + pp_rank. Collective over the mesh's tp and pp groups. On a
// mesh of one rank the tensors are views of the live ones, not copies: use them before the
// next step changes them (a checkpoint does).
nn::StateDict gather_model_state(const std::vector<std::shared_ptr<nn::GPT>>& chunks,
                                 const DeviceMesh& mesh);

// gather_model_state for other tensors shaped and split like the chunks' parameters (the
// optimizer's moments): local[c] holds, under each parameter name of chunk c, its tensor.
// Collective over the mesh's tp and pp groups.
nn::StateDict gather_parameter_tensors(const std::vector<std::shared_ptr<nn::GPT>>& chunks,
                                       const DeviceMesh& mesh,
                                       const std::vector<nn::StateDict>& local);

// Throws on every rank alike, naming the tensor, unless `full` holds exactly the single-process
// model's names with its shapes and dtypes (every rank learns them all over pp). Collective
// over the pp group. `what` starts each message.
void check_model_state(const std::vector<std::shared_ptr<nn::GPT>>& chunks, const DeviceMesh& mesh,
                       const nn::StateDict& full, const std::string& what = "load_full_state");

// The same for a source read by range (nn/io/tensor_source.h): exactly the model's names, each
// with every suffix (".exp_avg" and ".exp_avg_sq" for AdamW's moments), with its shapes; the
// source's dtype may differ (a read casts). Collective over the pp group.
void check_model_source(const std::vector<std::shared_ptr<nn::GPT>>& chunks, const DeviceMesh& mesh,
                        const nn::TensorSource& source, const std::string& what,
                        const std::vector<std::string>& suffixes = {""});

// check_model_state, then loads every chunk's slices of `full` (a tied copy takes wte.weight
// as well), so nothing is written unless all of it fits. Collective over the pp group.
void load_model_state(const std::vector<std::shared_ptr<nn::GPT>>& chunks, const DeviceMesh& mesh,
                      const nn::StateDict& full);

}  // namespace tessera::parallel
