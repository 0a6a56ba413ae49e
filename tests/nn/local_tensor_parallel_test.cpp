// The single-process TensorParallelOps that layers call when a model has no tensor parallelism:
// every region returns its input itself (no copy, no autograd node), the loss is the plain
// cross-entropy bit for bit, and a vocabulary slice that does not start at 0 is refused.

#include <gtest/gtest.h>

#include "nn/tiny_models.h"

namespace tessera::nn {
namespace {

TEST(LocalTensorParallel, RegionsReturnTheirInput) {
  const std::shared_ptr<TensorParallelOps> tp = local_tensor_parallel();
  EXPECT_EQ(tp->rank(), 0);
  EXPECT_EQ(tp->size(), 1);
  EXPECT_FALSE(tp->sequence_parallel());
  EXPECT_TRUE(tp->is_local());
  EXPECT_EQ(or_local(nullptr), tp);
  Generator gen(1);
  Tensor x = randn(Shape{2, 3, 4}, gen);
  x.set_requires_grad(true);
  for (const Tensor& y :
       {tp->copy_to_region(x), tp->reduce_from_region(x), tp->sequence_gather(x),
        tp->sequence_reduce_scatter(x), tp->scatter_sequence(x), tp->gather_sequence(x),
        tp->gather_last_dim(x), tp->enter_region(x, false), tp->exit_region(x, false)})
    EXPECT_EQ(y.impl_ptr(), x.impl_ptr());
}

TEST(LocalTensorParallel, TheLossIsThePlainCrossEntropy) {
  const std::shared_ptr<TensorParallelOps> tp = local_tensor_parallel();
  Generator gen(2);
  Tensor logits = randn(Shape{2, 5, 11}, gen);
  Tensor targets = testing::token_batch(2, 5, 9, 3);
  const float got = tp->vocab_parallel_cross_entropy(logits, targets, 0, 9, -1).item<float>();
  EXPECT_EQ(got, cross_entropy(logits, targets, -1, 9).item<float>());
  EXPECT_THROW(tp->vocab_parallel_cross_entropy(logits, targets, 4, 9, -1), Error);
}

// The model without a group says so, and its parameters are whole (replicated), not one part.
TEST(LocalTensorParallel, ASingleProcessModelKeepsWholeParameters) {
  GPT model(testing::tiny_llama());
  EXPECT_NE(model.describe_parallel().find("single process"), std::string::npos);
  for (const auto& [name, p] : model.named_parameters())
    EXPECT_EQ(model.param_meta(name).shard, ShardKind::replicated) << name;
}

}  // namespace
}  // namespace tessera::nn
