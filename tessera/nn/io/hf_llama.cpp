#include "tessera/nn/io/hf_llama.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/ops/movement.h"
#include "tessera/nn/io/detail/checkpoint_files.h"
#include "tessera/nn/io/detail/gpt2_weights.h"
#include "tessera/nn/io/safetensors.h"
#include "tessera/nn/io/safetensors_reader.h"

namespace tessera::nn {

namespace {

int64_t positive(const nlohmann::json& c, const char* key, const std::string& where) {
  TESSERA_CHECK(c.contains(key), where, ": no '", key, "'");
  const nlohmann::json& v = c[key];
  TESSERA_CHECK(v.is_number_integer() && v.get<int64_t>() > 0, where, ": '", key,
                "' must be a positive integer, got ", v.dump());
  return v.get<int64_t>();
}

bool is_set(const nlohmann::json& c, const char* key) {
  return c.contains(key) && !c[key].is_null() && !(c[key].is_boolean() && !c[key].get<bool>());
}

std::string layer(int64_t i, const char* rest) {
  return str_cat("model.layers.", i, ".", rest);
}
std::string block(int64_t i, const char* rest) {
  return str_cat("h.", i, ".", rest);
}

// Hugging Face name -> (Tessera name) for the tensors that map one to one.
std::vector<std::pair<std::string, std::string>> direct_names(const GPTConfig& c) {
  std::vector<std::pair<std::string, std::string>> names = {{"model.norm.weight", "ln_f.weight"}};
  for (int64_t i = 0; i < c.n_layer; ++i) {
    names.emplace_back(layer(i, "input_layernorm.weight"), block(i, "ln_1.weight"));
    names.emplace_back(layer(i, "post_attention_layernorm.weight"), block(i, "ln_2.weight"));
    names.emplace_back(layer(i, "self_attn.o_proj.weight"), block(i, "attn.c_proj.weight"));
    names.emplace_back(layer(i, "mlp.gate_proj.weight"), block(i, "mlp.w_gate.weight"));
    names.emplace_back(layer(i, "mlp.up_proj.weight"), block(i, "mlp.w_up.weight"));
    names.emplace_back(layer(i, "mlp.down_proj.weight"), block(i, "mlp.c_proj.weight"));
  }
  return names;
}

Shape shape_of_direct(const GPTConfig& c, const std::string& tessera) {
  const int64_t h = c.n_embd, f = c.ffn_dim();
  if (tessera.ends_with("ln_1.weight") || tessera.ends_with("ln_2.weight") ||
      tessera == "ln_f.weight")
    return {h};
  if (tessera.ends_with("attn.c_proj.weight")) return {h, h};
  if (tessera.ends_with("mlp.c_proj.weight")) return {h, f};
  return {f, h};  // w_gate, w_up
}

void check_llama_architecture(const GPTConfig& c, const std::string& where) {
  TESSERA_CHECK(c.norm == NormKind::rmsnorm && c.mlp == MlpKind::swiglu &&
                    c.position == PositionKind::rope && !c.bias,
                where,
                ": a Llama-style model has RMSNorm, SwiGLU, RoPE and no biases; this one "
                "has ",
                c.to_json().dump());
}

}  // namespace

bool is_hf_llama_config(const nlohmann::json& c) {
  if (!c.is_object()) return false;
  if (c.contains("model_type") && c["model_type"].is_string()) {
    const std::string t = c["model_type"].get<std::string>();
    if (t == "llama" || t == "mistral") return true;
  }
  if (c.contains("architectures") && c["architectures"].is_array())
    for (const auto& a : c["architectures"])
      if (a.is_string() && a.get<std::string>().ends_with("LlamaForCausalLM")) return true;
  return false;
}

GPTConfig hf_llama_config_to_tessera(const nlohmann::json& c, const std::string& where) {
  TESSERA_CHECK(is_hf_llama_config(c), where, ": not a Llama config (model_type ",
                c.contains("model_type") ? c["model_type"].dump() : std::string("missing"), ")");
  for (const char* key : {"rope_scaling", "attention_bias", "mlp_bias"})
    TESSERA_CHECK(!is_set(c, key), where, ": '", key, "' is ", c[key].dump(),
                  "; Tessera computes Llama models without it");
  if (c.contains("hidden_act"))
    TESSERA_CHECK(c["hidden_act"] == "silu", where, ": 'hidden_act' is ", c["hidden_act"].dump(),
                  "; Tessera's SwiGLU uses silu");
  if (c.contains("rope_parameters") && c["rope_parameters"].is_object() &&
      c["rope_parameters"].contains("rope_type"))
    TESSERA_CHECK(c["rope_parameters"]["rope_type"] == "default", where,
                  ": rope_parameters.rope_type is ", c["rope_parameters"]["rope_type"].dump(),
                  "; Tessera implements the default RoPE only");
  GPTConfig g;
  g.norm = NormKind::rmsnorm;
  g.mlp = MlpKind::swiglu;
  g.position = PositionKind::rope;
  g.bias = false;
  g.dropout = 0;
  g.vocab_size = positive(c, "vocab_size", where);
  g.n_embd = positive(c, "hidden_size", where);
  g.n_layer = positive(c, "num_hidden_layers", where);
  g.n_head = positive(c, "num_attention_heads", where);
  g.n_kv_head = c.contains("num_key_value_heads") && !c["num_key_value_heads"].is_null()
                    ? positive(c, "num_key_value_heads", where)
                    : g.n_head;
  g.ffn_hidden = positive(c, "intermediate_size", where);
  g.block_size = positive(c, "max_position_embeddings", where);
  TESSERA_CHECK(g.n_embd % g.n_head == 0, where, ": hidden_size ", g.n_embd,
                " is not a multiple of num_attention_heads ", g.n_head);
  if (c.contains("head_dim") && !c["head_dim"].is_null())
    TESSERA_CHECK(positive(c, "head_dim", where) == g.n_embd / g.n_head, where, ": head_dim ",
                  c["head_dim"].dump(),
                  " is not hidden_size / num_attention_heads = ", g.n_embd / g.n_head);
  TESSERA_CHECK(g.n_head % g.n_kv_head == 0, where, ": num_attention_heads ", g.n_head,
                " is not a multiple of num_key_value_heads ", g.n_kv_head);
  auto number = [&](const nlohmann::json& j, const char* key, double fallback) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    TESSERA_CHECK(
        j[key].is_number() && std::isfinite(j[key].get<double>()) && j[key].get<double>() > 0,
        where, ": '", key, "' must be a positive number, got ", j[key].dump());
    return j[key].get<double>();
  };
  g.rope_theta = number(c, "rope_theta", 10000.0);
  if (c.contains("rope_parameters") && c["rope_parameters"].is_object())
    g.rope_theta = number(c["rope_parameters"], "rope_theta", g.rope_theta);
  g.norm_eps = number(c, "rms_norm_eps", 1e-6);
  g.tie_embeddings = c.contains("tie_word_embeddings") && c["tie_word_embeddings"].is_boolean() &&
                     c["tie_word_embeddings"].get<bool>();
  g.validate();
  return g;
}

nlohmann::json hf_llama_config(const GPTConfig& c, int64_t eot_id) {
  check_llama_architecture(c, "export to Hugging Face Llama");
  nlohmann::json j = {{"architectures", {"LlamaForCausalLM"}},
                      {"model_type", "llama"},
                      {"vocab_size", c.vocab_size},
                      {"hidden_size", c.n_embd},
                      {"intermediate_size", c.ffn_dim()},
                      {"num_hidden_layers", c.n_layer},
                      {"num_attention_heads", c.n_head},
                      {"num_key_value_heads", c.n_kv_head},
                      {"head_dim", c.head_dim()},
                      {"max_position_embeddings", c.block_size},
                      {"hidden_act", "silu"},
                      {"rms_norm_eps", c.norm_eps},
                      {"rope_theta", c.rope_theta},
                      {"attention_bias", false},
                      {"mlp_bias", false},
                      {"tie_word_embeddings", c.tie_embeddings},
                      {"torch_dtype", "float32"}};
  if (eot_id >= 0) j["bos_token_id"] = j["eos_token_id"] = eot_id;
  return j;
}

StateDict tessera_to_hf_llama(const StateDict& model, const GPTConfig& c) {
  const std::string where = "export to Hugging Face Llama";
  check_llama_architecture(c, where);
  const int64_t h = c.n_embd, d = c.head_dim(), V = c.vocab_size, Vp = c.padded_vocab_size();
  std::set<std::string> used;
  auto take = [&](const std::string& name, const Shape& shape) {
    used.insert(name);
    return require_tensor(model, name, shape, where);
  };
  StateDict out;
  out.emplace_back("model.embed_tokens.weight",
                   ops::contiguous(ops::narrow(take("wte.weight", {Vp, h}), 0, 0, V)));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const Tensor qkv = take(block(i, "attn.c_attn.weight"), {(c.n_head + 2 * c.n_kv_head) * d, h});
    const int64_t q = c.n_head * d, kv = c.n_kv_head * d;
    out.emplace_back(layer(i, "self_attn.q_proj.weight"),
                     ops::contiguous(ops::narrow(qkv, 0, 0, q)));
    out.emplace_back(layer(i, "self_attn.k_proj.weight"),
                     ops::contiguous(ops::narrow(qkv, 0, q, kv)));
    out.emplace_back(layer(i, "self_attn.v_proj.weight"),
                     ops::contiguous(ops::narrow(qkv, 0, q + kv, kv)));
  }
  for (const auto& [hf_name, name] : direct_names(c))
    out.emplace_back(hf_name, ops::contiguous(take(name, shape_of_direct(c, name))));
  if (!c.tie_embeddings)
    out.emplace_back("lm_head.weight",
                     ops::contiguous(ops::narrow(take("lm_head.weight", {Vp, h}), 0, 0, V)));
  for (const auto& [name, t] : model)
    TESSERA_CHECK(used.count(name), where, ": tensor '", name, "' (", t.describe(),
                  ") has no counterpart in a Hugging Face Llama");
  return out;
}

namespace {

// The stored tensors of a Hugging Face folder by name: of model.safetensors (or the file given),
// or of the shards model.safetensors.index.json names, each tensor in the file it says.
struct StoredTensor {
  std::shared_ptr<const SafetensorsReader> file;
  const SafetensorsEntry* entry = nullptr;
};
std::map<std::string, StoredTensor> open_hf_files(const std::string& path,
                                                  const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::map<std::string, StoredTensor> out;
  auto open = [&](const fs::path& file, const nlohmann::json* weight_map) {
    auto reader = std::make_shared<const SafetensorsReader>(file.string());
    for (const SafetensorsEntry& e : reader->header().entries) {
      TESSERA_CHECK(weight_map == nullptr || (weight_map->contains(e.name) &&
                                              (*weight_map)[e.name] == file.filename().string()),
                    file.string(), ": tensor '", e.name, "' is not where ",
                    (dir / "model.safetensors.index.json").string(), " says");
      TESSERA_CHECK(out.emplace(e.name, StoredTensor{reader, &e}).second, file.string(),
                    ": tensor '", e.name, "' is stored twice");
    }
  };
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::is_regular_file(path) || !fs::exists(index)) {
    open(fs::is_directory(path) ? dir / "model.safetensors" : fs::path(path), nullptr);
    return out;
  }
  const nlohmann::json idx = read_json_file(index.string());
  TESSERA_CHECK(idx.is_object() && idx.contains("weight_map") && idx["weight_map"].is_object(),
                index.string(), ": expected an object with a 'weight_map' object");
  std::set<std::string> files;
  for (const auto& item : idx["weight_map"].items()) {
    TESSERA_CHECK(item.value().is_string(), index.string(), ": weight_map['", item.key(),
                  "'] must be a file name");
    const std::string f = item.value().get<std::string>();
    TESSERA_CHECK(f.find('/') == std::string::npos && f.find("..") == std::string::npos,
                  index.string(), ": shard name '", f, "' must be a file in the folder");
    files.insert(f);
  }
  for (const std::string& f : files) open(dir / f, &idx["weight_map"]);
  return out;
}

}  // namespace

std::shared_ptr<const TensorSource> hf_llama_source(const std::string& path,
                                                    GPTConfig* config_out) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
  const fs::path cfg_path = dir / "config.json";
  TESSERA_CHECK(fs::exists(cfg_path), path, ": a Llama model needs its config.json beside it");
  const GPTConfig c =
      hf_llama_config_to_tessera(read_json_file(cfg_path.string()), cfg_path.string());
  check_llama_architecture(c, dir.string());
  const std::map<std::string, StoredTensor> stored = open_hf_files(path, dir);

  const int64_t h = c.n_embd, d = c.head_dim(), V = c.vocab_size, Vp = c.padded_vocab_size();
  std::set<std::string> used;
  auto take = [&](const std::string& name, const Shape& shape) {
    const auto it = stored.find(name);
    TESSERA_CHECK(it != stored.end(), dir.string(), ": missing tensor '", name,
                  "' (expected shape ", shape, ")");
    TESSERA_CHECK(it->second.entry->shape == shape, dir.string(), ": tensor '", name,
                  "' has shape ", it->second.entry->shape, ", expected ", shape);
    used.insert(name);
    return TensorSource::Block{it->second.file, it->second.entry, shape.size() ? shape[0] : 1};
  };
  const TensorSource::Block padding{nullptr, nullptr, Vp - V};
  auto source = std::make_shared<TensorSource>(dir.string());
  source->add("wte.weight", {Vp, h}, {take("model.embed_tokens.weight", {V, h}), padding});
  for (int64_t i = 0; i < c.n_layer; ++i)
    source->add(block(i, "attn.c_attn.weight"), {(c.n_head + 2 * c.n_kv_head) * d, h},
                {take(layer(i, "self_attn.q_proj.weight"), {c.n_head * d, h}),
                 take(layer(i, "self_attn.k_proj.weight"), {c.n_kv_head * d, h}),
                 take(layer(i, "self_attn.v_proj.weight"), {c.n_kv_head * d, h})});
  for (const auto& [hf_name, name] : direct_names(c)) {
    const Shape shape = shape_of_direct(c, name);
    source->add(name, shape, {take(hf_name, shape)});
  }
  const bool has_head = stored.count("lm_head.weight") != 0;
  if (!c.tie_embeddings) {
    TESSERA_CHECK(has_head, dir.string(),
                  ": tie_word_embeddings is false but there is no lm_head.weight");
    source->add("lm_head.weight", {Vp, h}, {take("lm_head.weight", {V, h}), padding});
  } else if (has_head) {
    used.insert("lm_head.weight");  // a tied head saved anyway: the embedding's copy
  }
  for (const auto& [name, t] : stored)
    TESSERA_CHECK(used.count(name) || name.ends_with("rotary_emb.inv_freq"), dir.string(),
                  ": tensor '", name, "' (", dtype_name(t.entry->dtype), t.entry->shape,
                  ") has no counterpart in a Tessera Llama-style model");
  if (config_out) *config_out = c;
  return source;
}

StateDict import_hf_llama(const std::string& path, GPTConfig* config_out) {
  return hf_llama_source(path, config_out)->read_all();
}

void export_hf_llama(const std::string& dir, const StateDict& model, const GPTConfig& config,
                     int64_t eot_id) {
  namespace fs = std::filesystem;
  TESSERA_CHECK(eot_id >= -1 && eot_id < config.vocab_size, "export_hf_llama: end-of-text id ",
                eot_id, " is outside the vocabulary of ", config.vocab_size);
  const StateDict hf = tessera_to_hf_llama(model, config);
  const std::string cfg_text = hf_llama_config(config, eot_id).dump(2) + "\n";
  std::error_code ec;
  fs::create_directories(dir, ec);
  TESSERA_CHECK(!ec, "export_hf_llama: cannot create directory ", dir, ": ", ec.message());
  write_safetensors((fs::path(dir) / "model.safetensors").string(), hf, {{"format", "pt"}});
  write_file_atomic((fs::path(dir) / "config.json").string(), cfg_text);
}

}  // namespace tessera::nn
