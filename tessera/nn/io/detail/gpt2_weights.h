#pragma once
// What the GPT-2 weight formats (Hugging Face GPT-2, llm.c) share: the set of Tessera
// parameter names and shapes a GPT-2 has, the check that a config is a GPT-2 at all, and the
// vocabulary padding of the embedding rows.

#include <string>
#include <utility>
#include <vector>

#include "tessera/core/tensor.h"
#include "tessera/nn/gpt_config.h"
#include "tessera/nn/module.h"

namespace tessera::nn {

// Tessera's parameter names and shapes for a GPT-2-style config, in model order:
// wte, wpe, h.{i}.*, ln_f, then lm_head.weight when the embeddings are untied.
std::vector<std::pair<std::string, Shape>> gpt2_parameter_shapes(const GPTConfig& config);

// Throws, naming the field, unless config is a GPT-2 (LayerNorm, GELU MLP, learned positions,
// biases, one KV head per head): the only architecture `format` can hold.
void check_gpt2_architecture(const GPTConfig& config, const std::string& format);

// The first min(rows, t.size(0)) rows of a 2-D tensor, zero-padded to `rows` rows.
Tensor resize_rows(const Tensor& t, int64_t rows);

// dict's tensor `name`, which must have `shape`; the error names `source`, the tensor and both
// shapes.
Tensor require_tensor(const StateDict& dict, const std::string& name, const Shape& shape,
                      const std::string& source);

}  // namespace tessera::nn
