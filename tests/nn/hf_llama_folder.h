#pragma once
// A Hugging Face Llama folder as transformers writes a large model: the weights in a 16-bit
// dtype over several safetensors files that model.safetensors.index.json names, beside
// config.json. For the tests of reading such a folder by range (hf_llama_source).

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "tessera/core/file_io.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/nn/io/hf_llama.h"
#include "tessera/nn/io/safetensors.h"
#include "tests/nn/tiny_models.h"

namespace tessera::nn::testing {

// tiny_llama (RMSNorm, SwiGLU, RoPE, 4 query heads over 2 kv heads, no biases, an untied head)
// over the byte tokenizer's 257 ids, as wide as asked. The vocabulary is padded to the default
// multiple, as an imported config's is (Hugging Face's config.json records none).
inline GPTConfig byte_llama_config(int64_t n_embd = 32) {
  GPTConfig c = tiny_llama();
  c.vocab_size = 257;
  c.vocab_multiple = GPTConfig().vocab_multiple;
  c.block_size = 32;
  c.n_embd = n_embd;
  return c;
}

inline std::string hf_shard_name(int i, int files) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", i + 1, files);
  return name;
}

// Writes `model` (a Llama-style state dict of `config`) to `dir` in `dtype`, its tensors in
// order over `files` shards. A model of f32 reading the folder gets `model` rounded to dtype.
inline void write_hf_llama_shards(const std::string& dir, const StateDict& model,
                                  const GPTConfig& config, int files, DType dtype) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const StateDict hf = tessera_to_hf_llama(model, config);
  std::vector<StateDict> parts(static_cast<size_t>(files));
  nlohmann::json weight_map = nlohmann::json::object();
  int64_t total = 0;
  for (size_t i = 0; i < hf.size(); ++i) {
    const int file = int(i * size_t(files) / hf.size());
    const Tensor t = ops::cast(hf[i].second, dtype);
    parts[size_t(file)].emplace_back(hf[i].first, t);
    weight_map[hf[i].first] = hf_shard_name(file, files);
    total += int64_t(t.nbytes());
  }
  for (int f = 0; f < files; ++f)
    write_safetensors((fs::path(dir) / hf_shard_name(f, files)).string(), parts[size_t(f)],
                      {{"format", "pt"}});
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_file_atomic((fs::path(dir) / "model.safetensors.index.json").string(), index.dump(2));
  write_file_atomic((fs::path(dir) / "config.json").string(), hf_llama_config(config).dump(2));
}

// What a model of f32 reads from the folder write_hf_llama_shards made of `model`: tensor
// `name` rounded to `dtype`, the rows padding the vocabulary zero (the folder holds none).
inline Tensor folder_weight(const StateDict& model, const std::string& name,
                            const GPTConfig& config, DType dtype) {
  Tensor t = ops::cast(ops::cast(find_tensor(model, name), dtype), DType::f32);
  if (name != "wte.weight" && name != "lm_head.weight") return t;
  return ops::cat(
      {ops::narrow(t, 0, 0, config.vocab_size), zeros({t.size(0) - config.vocab_size, t.size(1)})},
      0);
}

}  // namespace tessera::nn::testing
