#pragma once
// GPT-2 weights in Hugging Face's layout (GPT2LMHeadModel / GPT2Model, model.safetensors).
//
// Hugging Face names tensors "transformer.h.N.attn.c_attn.weight" (or, in files saved from a
// bare GPT2Model such as the hub's original gpt2 checkpoint, without "transformer."), and its
// Conv1D layers store weights as [in, out], the transpose of Tessera's [out, in]. The vocabulary
// is unpadded, and lm_head.weight is absent or equal to wte when the embeddings are tied.
//
// Import maps all of that onto Tessera's names (see gpt2_weights.h), infers the config from the
// shapes and pads the embedding rows to the padded vocabulary; the caller then runs
// model.load_state_dict. Export is the inverse and writes a directory that transformers'
// GPT2LMHeadModel.from_pretrained loads.

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "tessera/nn/gpt_config.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

struct HfGpt2Options {
  // Heads cannot be inferred from shapes. 0: take n_head from config.json next to the file,
  // else GPT-2's convention n_embd / 64. Nonzero: use this (config.json must agree if present).
  int64_t n_head = 0;
  int64_t vocab_multiple = GPTConfig().vocab_multiple;  // padding of the embedding rows
};

// Reads `path` (a model.safetensors, or a directory holding one) and an optional config.json
// beside it. Returns the weights in Tessera names; *config_out (if not null) receives the
// config inferred from them. Errors name the file, the tensor and the expected shape.
StateDict import_hf_gpt2(const std::string& path, GPTConfig* config_out,
                         const HfGpt2Options& options = {});

// The mapping alone: `hf` in Hugging Face names; `hf_config` is config.json's object or null;
// `source` names the input in errors.
StateDict hf_gpt2_to_tessera(const StateDict& hf, const nlohmann::json* hf_config,
                             const HfGpt2Options& options, const std::string& source,
                             GPTConfig* config_out);

// Tessera weights (as model.state_dict() gives them) in Hugging Face names and layout.
StateDict tessera_to_hf_gpt2(const StateDict& model, const GPTConfig& config);
// The config.json transformers needs to build the matching GPT2LMHeadModel.
nlohmann::json hf_gpt2_config(const GPTConfig& config);

// Writes <dir>/model.safetensors (metadata format=pt, as transformers requires) and
// <dir>/config.json, each atomically; creates dir if needed. `eot_id`, the tokenizer's
// end-of-text id, becomes bos_token_id and eos_token_id (-1: left out, unless the vocabulary is
// GPT-2's, whose 50256 is written; transformers would otherwise assume 50256 for any model).
void export_hf_gpt2(const std::string& dir, const StateDict& model, const GPTConfig& config,
                    int64_t eot_id = -1);

}  // namespace tessera::nn
