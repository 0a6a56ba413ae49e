#include "tessera/parallel/data/grad_norm.h"

#include <cmath>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"
#include "tessera/core/ops/reduction.h"

namespace tessera::parallel {

bool counts_in_norm(const nn::ParamMeta& meta, int tp_rank) {
  if (meta.tied_copy) return false;
  return meta.shard != nn::ShardKind::replicated || tp_rank == 0;
}

GradNorm global_grad_norm(const std::vector<Tensor>& pieces,
                          const std::vector<Communicator*>& groups) {
  NoGradGuard no_grad;
  // The sum stays where the gradients are (over NCCL, on the device: one host read at the
  // end), widened to f64 so that the ranks' partial sums add without rounding to f32.
  Tensor total = pieces.empty() ? scalar_tensor(0.0, DType::f64)
                                : ops::cast(ops::squared_norm(pieces), DType::f64);
  for (Communicator* g : groups)
    if (g != nullptr) g->all_reduce(total);
  GradNorm out;
  out.norm = std::sqrt(ops::to(total, Device::cpu()).item<double>());
  out.finite = std::isfinite(out.norm);
  return out;
}

GradNorm global_grad_norm(const nn::StateDict& params,
                          const std::function<nn::ParamMeta(const std::string&)>& meta,
                          Communicator* tp, const std::vector<Communicator*>& groups) {
  const int tp_rank = tp != nullptr ? tp->rank() : 0;
  std::vector<Tensor> pieces;
  for (const auto& [name, p] : params) {
    if (!p.defined() || !p.grad().defined()) continue;
    if (counts_in_norm(meta ? meta(name) : nn::ParamMeta{}, tp_rank)) pieces.push_back(p.grad());
  }
  std::vector<Communicator*> all{tp};
  all.insert(all.end(), groups.begin(), groups.end());
  return global_grad_norm(pieces, all);
}

}  // namespace tessera::parallel
