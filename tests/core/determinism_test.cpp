// Results do not depend on the thread count: reductions (sum, mean, softmax, squared_norm),
// the AdamW step and dropout give identical bits with one thread and with two, on sizes that
// span several of the kernels' fixed chunks (cpu::kReduceChunk elements each).

#include <gtest/gtest.h>

#include <functional>

#include "tessera/core/cpu/parallel.h"
#include "tessera/tessera.h"

namespace tessera {
namespace {

// Runs f with 1 and with 2 threads and checks every output is bitwise equal.
void expect_same_bits(const std::function<std::vector<Tensor>()>& f) {
  ScopedNumThreads guard(1);
  std::vector<Tensor> one = f();
  set_num_threads(2);
  std::vector<Tensor> two = f();
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(equal(one[i], two[i])) << "output " << i;
}

// Several chunks plus a ragged tail.
const int64_t kLong = 5 * cpu::kReduceChunk + 1234;

Tensor data(const Shape& s, uint64_t seed, DType dt = DType::f32) {
  Generator g(seed);
  return randn(s, g, dt);
}

TEST(Determinism, SumAndMeanOverEveryLayout) {
  Tensor flat = data({kLong}, 1);
  Tensor rows = data({3, kLong}, 2);
  Tensor cols = data({kLong / 64, 64}, 3);
  Tensor mid = data({7, 4097, 9}, 4);
  Tensor half = data({kLong}, 5, DType::bf16);
  expect_same_bits([&] {
    return std::vector<Tensor>{ops::sum(flat),         // one long span
                               ops::sum(rows, {1}),    // long rows
                               ops::sum(cols, {0}),    // [1, r, inner] columns
                               ops::mean(mid, {1}),    // [outer, r, inner]
                               ops::sum(mid, {0, 2}),  // non-adjacent dims (a copy first)
                               ops::mean(ops::transpose(cols, 0, 1), {1}),
                               ops::sum(half)};
  });
}

TEST(Determinism, Softmax) {
  Tensor wide = data({3, kLong}, 6);
  Tensor many = data({2000, 77}, 7);
  expect_same_bits([&] {
    return std::vector<Tensor>{ops::softmax(wide), ops::log_softmax(wide), ops::softmax(many, 0),
                               ops::log_softmax(many)};
  });
}

TEST(Determinism, SquaredNorm) {
  std::vector<Tensor> xs = {data({kLong}, 8), data({3, 5}, 9), data({kLong / 3, 3}, 10),
                            data({777}, 11, DType::bf16)};
  expect_same_bits([&] { return std::vector<Tensor>{ops::squared_norm(xs)}; });
}

TEST(Determinism, AdamWAndDropout) {
  Tensor x = data({kLong}, 12);
  expect_same_bits([&] {
    Tensor p = data({kLong}, 13), g = data({kLong}, 14), m = zeros({kLong}), v = zeros({kLong});
    AdamWArgs a;
    a.weight_decay = 0.1f;
    for (int step = 1; step <= 3; ++step) {
      a.step = step;
      ops::adamw_step_(p, g, m, v, a);
    }
    return std::vector<Tensor>{p, m, v, ops::dropout(x, 0.1, 3, 17)};
  });
}

TEST(Determinism, BackwardOfAReduction) {
  Tensor base = data({64, kLong / 64}, 15);
  expect_same_bits([&] {
    Tensor x = ops::clone(base);
    x.set_requires_grad(true);
    Tensor loss = tessera::sum(tessera::mul(tessera::softmax(x, 0), x));
    loss.backward();
    return std::vector<Tensor>{loss, x.grad()};
  });
}

}  // namespace
}  // namespace tessera
