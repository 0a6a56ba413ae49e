// The single-process TensorParallelOps: a group of one rank. The layers call their regions
// unconditionally; here each is the identity on its input, so a model without tensor
// parallelism runs exactly the arithmetic it ran before the regions existed.

#include "tessera/autograd/functions/loss.h"
#include "tessera/core/error.h"
#include "tessera/nn/model_parallel.h"

namespace tessera::nn {

namespace {

class LocalTensorParallel final : public TensorParallelOps {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool sequence_parallel() const override { return false; }
  bool is_local() const override { return true; }

  Tensor copy_to_region(const Tensor& x) override { return x; }
  Tensor reduce_from_region(const Tensor& x) override { return x; }
  Tensor sequence_gather(const Tensor& x) override { return x; }
  Tensor sequence_reduce_scatter(const Tensor& x) override { return x; }
  Tensor scatter_sequence(const Tensor& x) override { return x; }
  Tensor gather_sequence(const Tensor& x) override { return x; }
  Tensor gather_last_dim(const Tensor& x) override { return x; }
  Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets,
                                      int64_t vocab_start, int64_t num_classes,
                                      int64_t ignore_index) override {
    TESSERA_CHECK(vocab_start == 0,
                  "vocab_parallel_cross_entropy: one rank holds the whole "
                  "vocabulary, so its slice starts at 0, got ",
                  vocab_start);
    return cross_entropy(logits, targets, ignore_index, num_classes);
  }
};

}  // namespace

std::shared_ptr<TensorParallelOps> local_tensor_parallel() {
  static const std::shared_ptr<TensorParallelOps> local = std::make_shared<LocalTensorParallel>();
  return local;
}

}  // namespace tessera::nn
