#pragma once
// Llama-style weights in Hugging Face's layout (LlamaForCausalLM: model.safetensors, or the
// shards a model.safetensors.index.json names, beside config.json).
//
// Hugging Face keeps q_proj, k_proj and v_proj apart, Tessera fuses them into c_attn's rows
// (q, then k, then v: the segments tensor parallelism splits); gate_proj, up_proj and down_proj
// are Tessera's w_gate, w_up and c_proj. Both store Linear weights [out, in] and both rotate
// RoPE's halves (d, d + D/2), so no weight is transposed or permuted. The vocabulary is
// unpadded in the files and padded to vocab_multiple in Tessera. config.json decides what the
// shapes cannot: heads, kv heads, RoPE theta (top-level `rope_theta`, or
// `rope_parameters.rope_theta` as transformers 5 writes it), RMSNorm epsilon, tied embeddings.
// What Tessera computes differently is refused, naming the key: rope_scaling, biases, an
// activation other than SiLU, a head_dim other than hidden_size / heads.

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "tessera/nn/gpt_config.h"
#include "tessera/nn/io/tensor_source.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

// Whether config.json describes a Llama-style model (model_type "llama" or "mistral", or a
// *LlamaForCausalLM architecture).
bool is_hf_llama_config(const nlohmann::json& config);

GPTConfig hf_llama_config_to_tessera(const nlohmann::json& config, const std::string& where);
// config.json for transformers' LlamaForCausalLM; `eot_id` >= 0 becomes bos/eos_token_id.
nlohmann::json hf_llama_config(const GPTConfig& config, int64_t eot_id = -1);

// The export mapping alone; errors name the tensor and the expected shape.
StateDict tessera_to_hf_llama(const StateDict& model, const GPTConfig& config);

// A folder (or its model.safetensors) with config.json, as Tessera's tensors read from the files
// by range (tensor_source.h): nothing is read but the headers and config.json until a reader
// asks, so a tensor-parallel rank reads only its slices. Tensors keep the files' dtype. Every
// stored tensor is checked here (names, shapes, the index's placement), and the errors name
// the folder or file, the tensor and the expected shape. *config_out receives the config.
std::shared_ptr<const TensorSource> hf_llama_source(const std::string& path, GPTConfig* config_out);
// The same read whole: the folder's tensors under Tessera's names.
StateDict import_hf_llama(const std::string& path, GPTConfig* config_out);
// Writes <dir>/model.safetensors (format=pt) and <dir>/config.json atomically.
void export_hf_llama(const std::string& dir, const StateDict& model, const GPTConfig& config,
                     int64_t eot_id = -1);

}  // namespace tessera::nn
