#include "tessera/plan/layout.h"

#include "tessera/core/error.h"

namespace tessera::plan {

parallel::ParallelConfig Layout::to_parallel_config(const Workload& w) const {
  parallel::ParallelConfig c;
  c.mesh = parallel::MeshShape(dp, pp, tp);
  c.zero_stage = zero;
  c.microbatches = microbatches;
  c.schedule = schedule();
  c.virtual_stages = virtual_stages;
  c.sequence_parallel = sequence_parallel;
  c.recompute = recompute;
  c.offload_optimizer = offload;
  c.batch_size = w.global_batch;
  c.seq_len = w.seq_len;
  c.precision = w.precision;
  c.device = Device::cuda(0);
  return c;
}

std::string Layout::invalid_reason(const Workload& w) const {
  if (sequence_parallel && tp == 1) return "sequence parallelism needs tp > 1";
  return parallel::layout_error(to_parallel_config(w), w.model, gpus());
}

std::string Layout::describe(const Workload& w) const {
  std::string s = str_cat("dp", dp, " tp", tp, " pp", pp);
  if (virtual_stages > 1) s += str_cat(" v", virtual_stages);
  s += str_cat(" m", microbatches, " b", micro_batch(w), " ZeRO-", zero);
  if (recompute.mode != nn::RecomputeMode::none) s += " " + recompute.describe();
  if (sequence_parallel) s += " sp";
  if (offload) s += " offload";
  return s;
}

std::string Layout::train_flags() const {
  std::string s = str_cat("--dp ", dp, " --tp ", tp, " --pp ", pp, " --zero ", zero,
                          " --microbatches ", microbatches);
  if (virtual_stages > 1) s += str_cat(" --schedule interleaved --virtual-stages ", virtual_stages);
  if (recompute.mode != nn::RecomputeMode::none) {
    s += str_cat(" --recompute ", nn::recompute_mode_name(recompute.mode));
    if (recompute.num_layers >= 0) s += str_cat(" --recompute-layers ", recompute.num_layers);
  }
  if (sequence_parallel) s += " --sequence-parallel";
  if (offload) s += " --offload optimizer";
  return s;
}

}  // namespace tessera::plan
