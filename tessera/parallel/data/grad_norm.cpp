#include "tessera/parallel/data/grad_norm.h"

#include <cmath>

#include "tessera/autograd/grad_mode.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/reduction.h"

namespace tessera::parallel {

bool counts_in_norm(const nn::ParamMeta& meta, int tp_rank) {
  if (meta.tied_copy) return false;
  return meta.shard != nn::ShardKind::replicated || tp_rank == 0;
}

GradNorm global_grad_norm(const std::vector<Tensor>& pieces,
                          const std::vector<Communicator*>& groups) {
  NoGradGuard no_grad;
  double local = 0.0;
  if (!pieces.empty()) local = double(ops::squared_norm(pieces).item<float>());
  Tensor total = scalar_tensor(local, DType::f64);
  for (Communicator* g : groups)
    if (g != nullptr) g->all_reduce(total);
  GradNorm out;
  out.norm = std::sqrt(total.item<double>());
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
