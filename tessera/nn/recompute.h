#pragma once
// Activation recomputation: which of a block's activations the forward pass keeps for backward,
// and which the backward pass computes again. docs/fitting.md has the picture and the figures.
//
//   none       every block keeps what its ops save: 16 h values per token and layer (GELU MLP)
//   selective  the MLP's activation output (GELU: the 4h post-GELU tensor; SwiGLU: silu(gate),
//              the product) is not kept: c_proj saves the pre-activation instead and applies
//              the activation again in its backward. An elementwise pass, no GEMM: a quarter
//              of a GELU block's activations for no measurable time (GPT-2 124M on the CPU:
//              0.95x none's step, docs/benchmarks.md).
//   full       a block keeps only its input; its backward runs the block's forward again (one
//              more forward per recomputed layer: 1.28x none's step on GPT-2 124M, CPU).
//              `num_layers` blocks per stage (the first ones, as Megatron's --recompute-method block; per
//              model chunk under interleaved 1F1B), -1 for all of them; the others keep
//              everything, as under none.
//
// Gradients are bit-identical to `none` on the CPU and the simulated GPU, under every layout
// (dropout masks are keyed by step, layer and element, so a recompute draws the same ones;
// ZeRO-3 holds a unit's parameters through its
// backward, which is where a recomputed block runs). On a real GPU `none` takes its post-GELU
// from cuBLASLt's GELU epilogue, whose rounding differs from Tessera's GELU kernel, so
// `selective` there matches `none` to rounding, not bitwise.

#include <cstdint>
#include <string>

#include "tessera/core/dtype.h"
#include "tessera/nn/gpt_config.h"

namespace tessera::nn {

enum class RecomputeMode { none, selective, full };

struct Recompute {
  RecomputeMode mode = RecomputeMode::none;
  int64_t num_layers = -1;  // full: blocks recomputed per stage, from its first; -1: all

  // Whether block i of a stage of n blocks runs under full recomputation.
  bool recomputes_block(int64_t i) const {
    return mode == RecomputeMode::full && (num_layers < 0 || i < num_layers);
  }
  // "none", "selective", "full" or "full (2 of each stage's layers)".
  std::string describe() const;
};

// "none" | "selective" | "full"; anything else throws naming the value and the choices.
RecomputeMode parse_recompute_mode(const std::string& name);
const char* recompute_mode_name(RecomputeMode mode);

// What one block saves for backward at the end of the forward pass, in bytes: the model's own
// prediction, op by op (the table in recompute.cpp), that the recompute tests hold the
// allocator to. With e the activation element size and b s tokens, a GELU block with learned
// positions in one process saves
//   none       e·bs·16h + 4·bs·(a + 4)     (a = n_head: attention's f32 logsumexp; 4 norm stats)
//   selective  e·bs·12h + 4·bs·(a + 4)     (the 4h post-GELU is recomputed)
//   full       e·bs·h                      (the block's input)
// Under tensor parallelism (tp > 1) the heads and MLP units are this rank's; with sequence
// parallelism the norm inputs and the block input are this rank's sequence shard.
int64_t block_activation_bytes(const GPTConfig& config, RecomputeMode mode, int64_t batch,
                               int64_t seq, DType dtype, int tp = 1,
                               bool sequence_parallel = false);

}  // namespace tessera::nn
