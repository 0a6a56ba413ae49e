#include "tessera/parallel/engine/detail/loss_weights.h"

#include "tessera/core/error.h"
#include "tessera/core/ops/creation.h"
#include "tessera/core/ops/movement.h"

namespace tessera::parallel {

std::vector<double> micro_batch_weights(const Tensor& targets, int microbatches,
                                        int64_t ignore_index, Communicator& dp, Device device) {
  const int M = microbatches;
  TESSERA_CHECK(M >= 1 && targets.defined() && targets.dim() == 2 && targets.size(0) % M == 0,
                "micro_batch_weights: targets ",
                targets.defined() ? targets.describe() : std::string("undefined"),
                " do not split into ", M, " micro-batches");
  const int64_t per_micro = targets.size(0) / M * targets.size(1);
  const std::vector<int64_t> ids =
      to_vector<int64_t>(ops::cast(ops::to(ops::contiguous(targets), Device::cpu()), DType::i64));
  std::vector<double> counts(static_cast<size_t>(M), 0.0);
  double local = 0;
  for (int m = 0; m < M; ++m) {
    for (int64_t i = 0; i < per_micro; ++i)
      counts[size_t(m)] += ids[size_t(m * per_micro + i)] != ignore_index ? 1.0 : 0.0;
    local += counts[size_t(m)];
  }
  Tensor total = from_vector<double>({local}, Shape{1});
  if (!device.is_cpu()) total = ops::to(total, device);
  dp.all_reduce(total, CommOp::sum);
  const double global = ops::to(total, Device::cpu()).item<double>();
  const double uniform = double(per_micro) * M * dp.size();
  std::vector<double> weights(static_cast<size_t>(M), 1.0);
  if (global == uniform) return weights;  // nothing ignored anywhere: every count is full
  for (int m = 0; m < M; ++m)
    weights[size_t(m)] = global > 0 ? counts[size_t(m)] * M * dp.size() / global : 0.0;
  return weights;
}

}  // namespace tessera::parallel
