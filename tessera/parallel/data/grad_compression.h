#pragma once
// Gradient compression for the data-parallel reduction: what travels instead of fp32
// gradients. docs/fitting.md has the measurements and when to use which.
//
//   none         fp32 reduce-scatter (and, at ZeRO 0, all-gather) of every bucket.
//   bf16         every bucket travels as bf16 and is summed in fp32 on the receiving rank
//                (Communicator's widening reduce-scatter): half the bytes. ZeRO 1-3 keep the
//                fp32 sum in their shard; ZeRO 0 all-gathers the shards in bf16 too, so every
//                rank applies the same bf16-rounded average. At ZeRO 2/3 the staging buffers
//                are bf16 as well (half their memory). Composes with ZeRO 0-3.
//   powersgd:R   rank-R PowerSGD (Vogels et al. 2019) for every matrix whose compression saves
//                at least 2x ((n + m) R <= n m / 2; biases, norms and small matrices travel
//                uncompressed): per bucket, P = M Q is all-reduced, orthogonalised, Q = M^T P
//                all-reduced, and P Q^T applied. Error feedback keeps M - P Q^T for the next step;
//                Q starts warm from the last step's. The first `warmup_steps` optimizer steps
//                reduce uncompressed (a compressed start slows early training). ZeRO 0 and 1
//                only: it compresses whole gradients and keeps a full-size residual on every
//                rank, the memory ZeRO 2/3 exist not to hold. Refused with fp16 loss scaling
//                too: a skipped step's inf/NaN would stay in the residual.
//
// The residual and Q are not saved in checkpoints: a resumed run continues the warm-up count
// from the optimizer's step, with a zero residual and a fresh Q (as PyTorch's PowerSGD hook
// does unless its state is pickled).

#include <cstdint>
#include <string>

namespace tessera::parallel {

enum class CompressionKind { none, bf16, powersgd };

struct GradCompression {
  CompressionKind kind = CompressionKind::none;
  int rank = 0;              // powersgd: R
  int64_t warmup_steps = 0;  // powersgd: uncompressed optimizer steps first
  uint64_t seed = 0x9d5c;    // powersgd: the initial Q (the same on every rank)

  bool compressing() const { return kind != CompressionKind::none; }
  // "none", "bf16", "powersgd:4" (", warm-up 100 steps" when set)
  std::string describe() const;
};

// "none" | "bf16" | "powersgd:R" (R >= 1); anything else throws naming `where`, the value and
// the choices.
GradCompression parse_grad_compression(const std::string& value, const std::string& where);

// Why `c` cannot apply at `zero_stage` (with fp16 loss scaling when `loss_scaling`), as one
// line, or "" when it can.
std::string grad_compression_error(const GradCompression& c, int zero_stage, bool loss_scaling);

// Whether PowerSGD at rank R compresses an n x m matrix: when it saves at least 2x.
inline bool powersgd_compresses(int64_t n, int64_t m, int rank) {
  return n >= 2 && m >= 2 && 2 * (n + m) * int64_t(rank) <= n * m;
}

}  // namespace tessera::parallel
