#include "tessera/parallel/engine/parallel_config.h"

#include <cmath>
#include <exception>

#include "tessera/core/error.h"

namespace tessera::parallel {

std::string ParallelConfig::describe() const {
  const std::string dtype =
      precision == nn::Precision::fp32 ? "" : str_cat(", ", nn::precision_name(precision));
  return str_cat(
      mesh.to_string(), ", ZeRO-", zero_stage, ", ",
      mesh.size("pp") > 1 ? schedule_kind_name(schedule) : "no pipeline", " v", virtual_stages,
      " m", microbatches, sequence_parallel ? ", sequence parallel" : "", ", batch ", batch_size,
      " x ", seq_len, dtype, bucket_mb > 0 ? str_cat(", buckets of ", bucket_mb, " MiB") : "",
      grad_compression.compressing() ? str_cat(", compression ", grad_compression.describe()) : "",
      overlap ? "" : ", reductions after backward",
      zero_stage == 3 && !zero3_prefetch ? ", no prefetch" : "",
      offload_optimizer ? ", optimizer offloaded" : "",
      recompute.mode == nn::RecomputeMode::none ? ""
                                                : str_cat(", recompute ", recompute.describe()),
      device.is_cpu() ? "" : str_cat(", on ", device.to_string()));
}

std::string layout_error(const ParallelConfig& c, const nn::GPTConfig& model, int world_size) {
  const MeshShape& m = c.mesh;
  const std::string bad = m.invalid_reason();
  if (!bad.empty()) return str_cat("mesh ", m.to_string(), ": ", bad);
  for (const MeshAxis& a : m.axes())
    if (a.name != "dp" && a.name != "pp" && a.name != "tp")
      return str_cat("mesh ", m.to_string(), ": the engine runs the axes dp, pp and tp, not ",
                     a.name);
  const int dp = m.size("dp"), pp = m.size("pp"), tp = m.size("tp");
  if (m.world_size() != world_size)
    return str_cat("dp*tp*pp = ", dp, "*", tp, "*", pp, " = ", m.world_size(),
                   " does not match the ", world_size, " ranks");
  if (c.zero_stage < 0 || c.zero_stage > 3)
    return str_cat("ZeRO stage must be 0, 1, 2 or 3, got ", c.zero_stage);
  if (!(c.bucket_mb >= 0) || !std::isfinite(c.bucket_mb))
    return str_cat("bucket size must be >= 0 MiB (0: one bucket per unit), got ", c.bucket_mb);
  if (c.bucket_mb > 0 && c.zero_stage == 3)
    return str_cat("bucket size ", c.bucket_mb, " MiB under ZeRO-3: its buckets are its units ",
                   "(each gathered when the unit runs), so they cannot be sized");
  if (c.bucket_mb > 0 && c.bucket_mb * double(int64_t(1) << 20) < 4)
    return str_cat("bucket size ", c.bucket_mb, " MiB is below one fp32 value");
  if (c.grad_compression.compressing() && dp == 1)
    return str_cat("gradient compression ", c.grad_compression.describe(),
                   " with dp 1: there is no data-parallel reduction to compress");
  if (const std::string why = grad_compression_error(c.grad_compression, c.zero_stage,
                                                     c.precision == nn::Precision::fp16);
      !why.empty())
    return why;
  if (c.offload_optimizer) {
    if (!c.device.is_cuda())
      return str_cat("optimizer offload moves the optimizer from a GPU to host memory; on ",
                     c.device.to_string(), " it is in host memory already");
    if (c.precision == nn::Precision::fp32)
      return "optimizer offload needs bf16 or fp16: under fp32 the model computes with the "
             "master weights, which offload keeps off the device";
    if (c.zero_stage == 0 && dp > 1)
      return str_cat("optimizer offload updates each rank's shard on the host, and ZeRO 0 at dp ",
                     dp, " has every rank update all of it: use ZeRO 1, 2 or 3");
  }
  if (c.virtual_stages > 1 && pp == 1)
    return str_cat("virtual stages V = ", c.virtual_stages,
                   " need a pipeline (pp > 1); with pp = 1 use V = 1");
  const std::string schedule =
      schedule_invalid_reason(c.schedule, pp, c.virtual_stages, c.microbatches);
  if (!schedule.empty())
    return str_cat("schedule ", schedule_kind_name(c.schedule), ": ", schedule);
  try {
    model.validate();
  } catch (const std::exception& e) {
    return e.what();
  }
  if (model.n_head % tp != 0)
    return str_cat("n_head ", model.n_head, " is not divisible by tp ", tp);
  if (model.n_kv_head % tp != 0)
    return str_cat("n_kv_head ", model.n_kv_head, " is not divisible by tp ", tp);
  if (model.ffn_dim() % tp != 0)
    return str_cat("the MLP width ", model.ffn_dim(), " is not divisible by tp ", tp);
  const int64_t stages = int64_t(pp) * c.virtual_stages;
  if (model.n_layer % stages != 0)
    return str_cat("n_layer ", model.n_layer, " is not divisible by pp*V = ", pp, "*",
                   c.virtual_stages);
  const int64_t split = int64_t(dp) * c.microbatches;
  if (c.batch_size < 1 || c.batch_size % split != 0)
    return str_cat("global batch ", c.batch_size, " not divisible by dp*M = ", dp, "*",
                   c.microbatches, " = ", split);
  if (c.seq_len < 1 || c.seq_len > model.block_size)
    return str_cat("sequence length T = ", c.seq_len,
                   " must be in [1, block_size = ", model.block_size, "]");
  if (c.sequence_parallel && c.seq_len % tp != 0)
    return str_cat("T = ", c.seq_len, " not divisible by tp ", tp, " with sequence parallelism");
  if (std::isnan(c.max_grad_norm)) return "max_grad_norm is NaN";
  try {
    c.adamw.validate();
    c.lr_schedule.validate();
    if (c.precision == nn::Precision::fp16) c.loss_scaler.validate();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace tessera::parallel
