#include "tessera/nn/recompute.h"

#include "tessera/core/error.h"

namespace tessera::nn {

RecomputeMode parse_recompute_mode(const std::string& name) {
  if (name == "none") return RecomputeMode::none;
  if (name == "selective") return RecomputeMode::selective;
  if (name == "full") return RecomputeMode::full;
  detail::throw_error("recompute: unknown mode \"", name, "\" (none, selective or full)");
}

const char* recompute_mode_name(RecomputeMode mode) {
  switch (mode) {
    case RecomputeMode::none:
      return "none";
    case RecomputeMode::selective:
      return "selective";
    case RecomputeMode::full:
      return "full";
  }
  return "?";
}

std::string Recompute::describe() const {
  if (mode != RecomputeMode::full || num_layers < 0) return recompute_mode_name(mode);
  return str_cat("full (", num_layers, " of each stage's layers)");
}

// Per token of the batch, what each op of block.cpp saves (autograd/functions/*: the norms save
// their input and f32 statistics, a linear its input, attention q, k, v, its output and the f32
// logsumexp; dropout replays its keyed mask and saves nothing; the residual adds save nothing):
//
//   ln_1        x                            h      (the block input; full keeps only this)
//   c_attn      ln_1(x)                      h      (gathered: the whole sequence under SP)
//   attention   q, k, v: the qkv buffer      (H + 2 Hkv) d / tp   (v is a view of it)
//               RoPE's rotated q and k       (H + Hkv) d / tp     (rope only)
//               out (= c_proj's input)       h / tp,   lse: 4 bytes x H / tp
//   ln_2        x + attn                     h
//   MLP input   ln_2(.)                      h      (gathered under SP; w_gate and w_up share)
//   GELU        pre-GELU (linear_gelu)       f / tp,   post-GELU (c_proj's input)   f / tp
//   SwiGLU      gate, silu(gate), up, product             4 f / tp
//   selective   drops the post-GELU (GELU) or silu(gate) and the product (SwiGLU)
//   norm stats  LayerNorm mean and rstd, RMSNorm rstd: 4 bytes each, per local token, twice
//
// GELU, learned positions, one process: 16 h values per token, the counterpart of Korthikanti
// et al.'s 34 s b h bytes at 2 bytes per value (Tessera keeps no attention scores and no
// dropout masks: the fused kernel recomputes the softmax, and masks come from Philox).
int64_t block_activation_bytes(const GPTConfig& c, RecomputeMode mode, int64_t batch, int64_t seq,
                               DType dtype, int tp, bool sequence_parallel) {
  const int64_t e = dtype_size(dtype), tokens = batch * seq;
  const int64_t h = c.n_embd, d = c.head_dim(), f = c.ffn_dim();
  const int64_t heads = c.n_head / tp, kv = c.n_kv_head / tp;
  // Tokens this rank holds outside the tensor-parallel regions.
  const int64_t local = sequence_parallel ? tokens / tp : tokens;
  if (mode == RecomputeMode::full) return e * local * h;
  const int64_t stats = c.norm == NormKind::layernorm ? 2 : 1;
  int64_t values = local * h * 2;           // ln_1's and ln_2's inputs
  values += tokens * h * 2;                 // the inputs of c_attn and the MLP
  values += tokens * (heads + 2 * kv) * d;  // qkv
  if (c.position == PositionKind::rope) values += tokens * (heads + kv) * d;
  values += tokens * heads * d;  // attention's output
  const int64_t fl = f / tp;
  if (c.mlp == MlpKind::gelu)
    values += tokens * fl * (mode == RecomputeMode::selective ? 1 : 2);
  else
    values += tokens * fl * (mode == RecomputeMode::selective ? 2 : 4);
  return e * values + 4 * (tokens * heads + 2 * stats * local);
}

}  // namespace tessera::nn
