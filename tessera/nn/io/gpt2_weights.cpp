#include "tessera/nn/io/detail/gpt2_weights.h"

#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"

namespace tessera::nn {

std::vector<std::pair<std::string, Shape>> gpt2_parameter_shapes(const GPTConfig& config) {
  const int64_t C = config.n_embd, H = config.ffn_dim(), V = config.padded_vocab_size();
  std::vector<std::pair<std::string, Shape>> out = {{"wte.weight", {V, C}},
                                                    {"wpe.weight", {config.block_size, C}}};
  for (int64_t i = 0; i < config.n_layer; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    out.insert(out.end(), {{p + "ln_1.weight", {C}},
                           {p + "ln_1.bias", {C}},
                           {p + "attn.c_attn.weight", {3 * C, C}},
                           {p + "attn.c_attn.bias", {3 * C}},
                           {p + "attn.c_proj.weight", {C, C}},
                           {p + "attn.c_proj.bias", {C}},
                           {p + "ln_2.weight", {C}},
                           {p + "ln_2.bias", {C}},
                           {p + "mlp.c_fc.weight", {H, C}},
                           {p + "mlp.c_fc.bias", {H}},
                           {p + "mlp.c_proj.weight", {C, H}},
                           {p + "mlp.c_proj.bias", {C}}});
  }
  out.emplace_back("ln_f.weight", Shape{C});
  out.emplace_back("ln_f.bias", Shape{C});
  if (!config.tie_embeddings) out.emplace_back("lm_head.weight", Shape{V, C});
  return out;
}

void check_gpt2_architecture(const GPTConfig& config, const std::string& format) {
  config.validate();
  auto require = [&](bool ok, const char* field, const char* value, const char* need) {
    TESSERA_CHECK(ok, format, " holds GPT-2 models only: config ", field, " is ", value,
                  ", but GPT-2 needs ", need);
  };
  require(config.norm == NormKind::layernorm, "norm", "rmsnorm", "layernorm");
  require(config.mlp == MlpKind::gelu, "mlp", "swiglu", "gelu");
  require(config.position == PositionKind::learned, "position", "rope", "learned");
  require(config.bias, "bias", "false", "true");
  TESSERA_CHECK(config.n_kv_head == config.n_head, format,
                " holds GPT-2 models only: config n_kv_head (", config.n_kv_head,
                ") must equal n_head (", config.n_head, ")");
}

Tensor resize_rows(const Tensor& t, int64_t rows) {
  TESSERA_CHECK(t.dim() == 2, "resize_rows: expected a 2-D tensor, got ", t.describe());
  const int64_t keep = std::min(rows, t.size(0));
  if (keep == rows && t.size(0) == rows) return t;
  Tensor out = zeros({rows, t.size(1)}, t.dtype(), t.device());
  ops::copy_(ops::narrow(out, 0, 0, keep), ops::narrow(t, 0, 0, keep));
  return out;
}

Tensor require_tensor(const StateDict& dict, const std::string& name, const Shape& shape,
                      const std::string& source) {
  Tensor t = find_tensor(dict, name);
  TESSERA_CHECK(t.defined(), source, ": missing tensor '", name, "' (expected shape ", shape, ")");
  TESSERA_CHECK(t.shape() == shape, source, ": tensor '", name, "' has shape ", t.shape(),
                ", expected ", shape);
  return t;
}

}  // namespace tessera::nn
