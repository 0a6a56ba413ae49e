#include "tessera/nn/io/hf_gpt2.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/file_io.h"
#include "tessera/core/json_depth.h"
#include "tessera/core/ops/movement.h"
#include "tessera/nn/io/detail/gpt2_weights.h"
#include "tessera/nn/io/safetensors.h"

namespace tessera::nn {

namespace {

constexpr const char* kPrefix = "transformer.";

// The layers Hugging Face implements with Conv1D, whose weight is stored [in, out].
bool is_conv1d(const std::string& tessera_name) {
  for (const char* suffix :
       {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    if (tessera_name.ends_with(suffix)) return true;
  return false;
}

bool is_vocab_rows(const std::string& tessera_name) {
  return tessera_name == "wte.weight" || tessera_name == "lm_head.weight";
}

// The block index of "h.<N>.<rest>", or -1; *rest receives <rest>.
int64_t layer_index(const std::string& name, std::string* rest) {
  if (!name.starts_with("h.")) return -1;
  size_t dot = name.find('.', 2);
  if (dot == std::string::npos || dot == 2 || dot > 11) return -1;
  int64_t n = 0;
  for (size_t i = 2; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    n = n * 10 + (name[i] - '0');
  }
  if (name[2] == '0' && dot > 3) return -1;  // "h.01." is not a block name
  *rest = name.substr(dot + 1);
  return n;
}

Tensor transposed(const Tensor& t) {
  return ops::contiguous(ops::transpose(t, 0, 1));
}

bool same_values(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  Tensor ha = ops::contiguous(ops::to(a, Device::cpu()));
  Tensor hb = ops::contiguous(ops::to(b, Device::cpu()));
  return ha.nbytes() == 0 || std::memcmp(ha.data_ptr(), hb.data_ptr(), ha.nbytes()) == 0;
}

// A positive integer field of config.json, or 0 when absent.
int64_t config_int(const nlohmann::json& cfg, const char* key, const std::string& where) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return 0;
  TESSERA_CHECK(it->is_number_integer() && it->get<int64_t>() > 0, where, ": '", key,
                "' must be a positive integer, got ", it->dump());
  return it->get<int64_t>();
}

// Applies config.json (if any) to the config inferred from the shapes, rejecting a config.json
// that disagrees with the weights or describes a model Tessera computes differently.
void apply_hf_config(const nlohmann::json& cfg, const std::string& where, GPTConfig& c) {
  TESSERA_CHECK(cfg.is_object(), where, ": expected a JSON object, got ", cfg.type_name());
  if (auto it = cfg.find("model_type"); it != cfg.end())
    TESSERA_CHECK(*it == "gpt2", where, ": model_type is ", it->dump(), ", expected \"gpt2\"");
  auto agree = [&](const char* key, int64_t inferred, const char* what) {
    int64_t v = config_int(cfg, key, where);
    TESSERA_CHECK(v == 0 || v == inferred, where, ": '", key, "' is ", v, " but the weights have ",
                  what, " ", inferred);
  };
  agree("n_embd", c.n_embd, "width");
  agree("n_layer", c.n_layer, "layer count");
  agree("vocab_size", c.vocab_size, "vocabulary size");
  agree("n_positions", c.block_size, "position count");
  agree("n_inner", c.ffn_dim(), "MLP width");
  if (auto it = cfg.find("activation_function"); it != cfg.end())
    TESSERA_CHECK(*it == "gelu_new" || *it == "gelu_pytorch_tanh" || *it == "gelu_fast", where,
                  ": activation_function ", it->dump(),
                  " is not the tanh-form GELU Tessera computes (gelu_new)");
  if (auto it = cfg.find("scale_attn_weights"); it != cfg.end())
    TESSERA_CHECK(*it != false, where, ": scale_attn_weights=false is not supported");
  if (auto it = cfg.find("scale_attn_by_inverse_layer_idx"); it != cfg.end())
    TESSERA_CHECK(*it != true, where, ": scale_attn_by_inverse_layer_idx=true is not supported");
  if (auto it = cfg.find("layer_norm_epsilon"); it != cfg.end()) {
    TESSERA_CHECK(it->is_number() && it->get<double>() > 0, where,
                  ": 'layer_norm_epsilon' must be a positive number, got ", it->dump());
    c.norm_eps = it->get<double>();
  }
}

}  // namespace

StateDict hf_gpt2_to_tessera(const StateDict& hf, const nlohmann::json* hf_config,
                             const HfGpt2Options& options, const std::string& source,
                             GPTConfig* config_out) {
  const std::string cfg_where = source + " (config.json)";
  // Hugging Face names without the "transformer." prefix; the attention-mask buffers that
  // older files carry are not weights.
  std::map<std::string, Tensor> remaining;
  std::set<int64_t> layers;
  for (const auto& [hf_name, t] : hf) {
    std::string name =
        hf_name.starts_with(kPrefix) ? hf_name.substr(std::strlen(kPrefix)) : hf_name;
    std::string rest;
    int64_t layer = layer_index(name, &rest);
    if (layer >= 0 && (rest == "attn.bias" || rest == "attn.masked_bias")) continue;
    if (layer >= 0) layers.insert(layer);
    TESSERA_CHECK(remaining.emplace(name, t).second, source, ": tensor '", name,
                  "' appears both with and without the 'transformer.' prefix");
  }
  TESSERA_CHECK(!layers.empty(), source, ": no transformer blocks (tensors named h.0.*) found");
  const int64_t n_layer = *layers.rbegin() + 1;
  TESSERA_CHECK(int64_t(layers.size()) == n_layer, source, ": blocks h.0 to h.", n_layer - 1,
                " are named, but only ", layers.size(), " of them have tensors");
  auto matrix = [&](const std::string& name) {
    auto it = remaining.find(name);
    TESSERA_CHECK(it != remaining.end(), source, ": missing tensor '", kPrefix, name, "'");
    TESSERA_CHECK(it->second.dim() == 2, source, ": tensor '", kPrefix, name,
                  "' must be 2-D, got shape ", it->second.shape());
    return it->second;
  };

  GPTConfig c;
  const Tensor wte = matrix("wte.weight");
  c.vocab_size = wte.size(0);
  c.vocab_multiple = options.vocab_multiple;
  c.n_embd = wte.size(1);
  c.block_size = matrix("wpe.weight").size(0);
  c.n_layer = n_layer;
  const int64_t ffn = matrix("h.0.mlp.c_fc.weight").size(1);
  c.ffn_hidden = ffn == 4 * c.n_embd ? 0 : ffn;

  int64_t cfg_heads = 0;
  std::optional<bool> cfg_tie;  // transformers' default is tied
  if (hf_config) {
    apply_hf_config(*hf_config, cfg_where, c);
    cfg_heads = config_int(*hf_config, "n_head", cfg_where);
    cfg_tie = true;
    if (auto it = hf_config->find("tie_word_embeddings"); it != hf_config->end()) {
      TESSERA_CHECK(it->is_boolean(), cfg_where, ": 'tie_word_embeddings' must be true or false");
      cfg_tie = it->get<bool>();
    }
  }
  // Tied unless lm_head.weight holds its own values or config.json unties.
  if (auto it = remaining.find("lm_head.weight"); it != remaining.end()) {
    const bool equal = same_values(it->second, wte);
    TESSERA_CHECK(equal || !cfg_tie.value_or(false), cfg_where,
                  ": lm_head.weight differs from wte.weight, but tie_word_embeddings is true "
                  "(or absent, which means true)");
    c.tie_embeddings = cfg_tie.value_or(equal);
    if (c.tie_embeddings) remaining.erase(it);
  } else {
    TESSERA_CHECK(cfg_tie.value_or(true), cfg_where,
                  ": tie_word_embeddings is false but there is no lm_head.weight");
    c.tie_embeddings = true;
  }

  TESSERA_CHECK(options.n_head == 0 || cfg_heads == 0 || options.n_head == cfg_heads, source,
                ": n_head ", options.n_head, " was asked for but config.json says ", cfg_heads);
  c.n_head = options.n_head > 0 ? options.n_head : cfg_heads;
  if (c.n_head == 0) {
    TESSERA_CHECK(c.n_embd % 64 == 0, source,
                  ": n_head is not stored in the weights and there is no config.json; GPT-2's "
                  "head size of 64 does not divide n_embd ",
                  c.n_embd, ", so pass n_head");
    c.n_head = c.n_embd / 64;
  }
  c.n_kv_head = c.n_head;
  c.validate();

  StateDict out;
  for (const auto& [name, shape] : gpt2_parameter_shapes(c)) {
    Shape hf_shape = shape;
    if (is_vocab_rows(name)) hf_shape[0] = c.vocab_size;
    if (is_conv1d(name)) std::swap(hf_shape[0], hf_shape[1]);
    const std::string hf_name = name == "lm_head.weight" ? name : kPrefix + name;
    auto it = remaining.find(name);
    TESSERA_CHECK(it != remaining.end(), source, ": missing tensor '", hf_name,
                  "' (expected shape ", hf_shape, ")");
    TESSERA_CHECK(it->second.shape() == hf_shape, source, ": tensor '", hf_name, "' has shape ",
                  it->second.shape(), ", expected ", hf_shape,
                  is_conv1d(name) ? " (Conv1D weights are stored [in, out])" : "");
    Tensor t = it->second;
    remaining.erase(it);
    if (is_conv1d(name)) t = transposed(t);
    if (is_vocab_rows(name)) t = resize_rows(t, c.padded_vocab_size());
    out.emplace_back(name, t);
  }
  if (!remaining.empty())
    detail::throw_error(source, ": unexpected tensor '", remaining.begin()->first, "' (",
                        remaining.begin()->second.describe(), ") is not part of a GPT-2 with ",
                        c.n_layer, " layers");
  if (config_out) *config_out = c;
  return out;
}

StateDict import_hf_gpt2(const std::string& path, GPTConfig* config_out,
                         const HfGpt2Options& options) {
  namespace fs = std::filesystem;
  const fs::path file =
      fs::is_directory(path) ? fs::path(path) / "model.safetensors" : fs::path(path);
  const fs::path cfg_path = file.parent_path() / "config.json";
  nlohmann::json cfg;
  const bool have_cfg = fs::exists(cfg_path);
  if (have_cfg) {
    const std::string text = read_text_file(cfg_path.string());
    check_json_depth(text, cfg_path.string());
    try {
      cfg = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      detail::throw_error(cfg_path.string(), ": not valid JSON (byte ", e.byte, "): ", e.what());
    } catch (const nlohmann::json::exception& e) {  // a number past a double's range
      detail::throw_error(cfg_path.string(), ": not valid JSON: ", e.what());
    }
  }
  SafetensorsFile st = read_safetensors(file.string());
  return hf_gpt2_to_tessera(st.tensors, have_cfg ? &cfg : nullptr, options, file.string(),
                            config_out);
}

StateDict tessera_to_hf_gpt2(const StateDict& model, const GPTConfig& config) {
  const std::string where = "export to Hugging Face GPT-2";
  check_gpt2_architecture(config, "Hugging Face GPT-2");
  StateDict out;
  auto shapes = gpt2_parameter_shapes(config);
  for (const auto& [name, shape] : shapes) {
    Tensor t = require_tensor(model, name, shape, where);
    if (is_vocab_rows(name)) t = ops::contiguous(ops::narrow(t, 0, 0, config.vocab_size));
    if (is_conv1d(name)) t = transposed(t);
    out.emplace_back(name == "lm_head.weight" ? name : kPrefix + name, t);
  }
  for (const auto& [name, t] : model) {
    bool known = false;
    for (const auto& s : shapes) known = known || s.first == name;
    TESSERA_CHECK(known, where, ": tensor '", name, "' (", t.describe(),
                  ") has no counterpart in a Hugging Face GPT-2");
  }
  return out;
}

nlohmann::json hf_gpt2_config(const GPTConfig& config) {
  check_gpt2_architecture(config, "Hugging Face GPT-2");
  nlohmann::json j = {{"architectures", {"GPT2LMHeadModel"}},
                      {"model_type", "gpt2"},
                      {"vocab_size", config.vocab_size},
                      {"n_positions", config.block_size},
                      {"n_ctx", config.block_size},
                      {"n_embd", config.n_embd},
                      {"n_layer", config.n_layer},
                      {"n_head", config.n_head},
                      {"n_inner", nullptr},
                      {"activation_function", "gelu_new"},
                      {"layer_norm_epsilon", config.norm_eps},
                      {"resid_pdrop", config.dropout},
                      {"embd_pdrop", config.dropout},
                      {"attn_pdrop", config.dropout},
                      {"initializer_range", 0.02},
                      {"tie_word_embeddings", config.tie_embeddings}};
  if (config.ffn_hidden > 0) j["n_inner"] = config.ffn_hidden;
  // GPT-2's tokenizer marks <|endoftext|> as both; other vocabularies have their own.
  if (config.vocab_size == 50257) j["bos_token_id"] = j["eos_token_id"] = 50256;
  return j;
}

void export_hf_gpt2(const std::string& dir, const StateDict& model, const GPTConfig& config,
                    int64_t eot_id) {
  namespace fs = std::filesystem;
  TESSERA_CHECK(eot_id >= -1 && eot_id < config.vocab_size, "export_hf_gpt2: end-of-text id ",
                eot_id, " is outside the vocabulary of ", config.vocab_size);
  StateDict hf = tessera_to_hf_gpt2(model, config);
  nlohmann::json cfg = hf_gpt2_config(config);
  if (eot_id >= 0) cfg["bos_token_id"] = cfg["eos_token_id"] = eot_id;
  const std::string cfg_text = cfg.dump(2) + "\n";
  std::error_code ec;
  fs::create_directories(dir, ec);
  TESSERA_CHECK(!ec, "export_hf_gpt2: cannot create directory ", dir, ": ", ec.message());
  write_safetensors((fs::path(dir) / "model.safetensors").string(), hf, {{"format", "pt"}});
  write_file_atomic((fs::path(dir) / "config.json").string(), cfg_text);
}

}  // namespace tessera::nn
