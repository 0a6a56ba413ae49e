// Harness case for embedding, plus checks of its scatter-add backward: repeated ids summed in
// a fixed order (the same bits for any thread count), 16-bit gradients summed in f32, and the
// position of a bad id.

#include <gtest/gtest.h>

#include "ops/harness.h"

namespace tessera::testing {
namespace {

// ids of the given shape in [0, v), stored transposed (non-contiguous) about half the time.
Tensor make_ids(CaseRng& rng, const Shape& s, int64_t v, DType dt) {
  if (s.size() >= 2 && rng.coin()) {
    Shape t = s;
    std::swap(t[0], t[t.size() - 1]);
    return ops::transpose(rng.ids(t, v, dt), 0, -1);
  }
  return rng.ids(s, v, dt);
}

// out[i..., c] = weight[ids[i...], c]
HostTensor embedding_reference(const HostTensor& w, const HostTensor& ids) {
  const int64_t c = w.shape[1];
  Shape s = ids.shape;
  s.push_back(c);
  HostTensor out(s);
  for (size_t i = 0; i < ids.v.size(); ++i)
    for (int64_t j = 0; j < c; ++j)
      out.v[i * size_t(c) + size_t(j)] = w.v[size_t(ids.v[i]) * size_t(c) + size_t(j)];
  return out;
}

}  // namespace

TESSERA_OP_CASE(embedding) {
  OpCase c;
  c.name = "embedding";
  c.make_inputs = [](CaseRng& rng, DType dt) {
    // A small vocabulary, so ids repeat and the backward pass must sum rows.
    const int64_t v = rng.size(1, 13), width = rng.size(1, 19);
    Shape s = rng.shape(int(rng.size(0, 3)), 1, 5);
    DType id_dtype = rng.coin() ? DType::i32 : DType::i64;
    return std::vector<Tensor>{rng.tensor(Shape{v, width}, dt), make_ids(rng, s, v, id_dtype)};
  };
  c.run = [](const std::vector<Tensor>& in) { return tessera::embedding(in[0], in[1]); };
  c.reference = [](const std::vector<Tensor>& in) {
    return embedding_reference(HostTensor(in[0]), HostTensor(in[1])).to_tensor();
  };
  c.grad_inputs = {0};
  // A gather copies values exactly: the f32 result equals the reference bit for bit.
  c.rtol = 0.0;
  c.atol = 0.0;
  return c;
}

namespace {

// gweight[k, c] = sum of gy rows whose id is k, in plain loops.
HostTensor scatter_reference(const HostTensor& ids, const HostTensor& gy, int64_t v) {
  const int64_t c = gy.shape.back();
  HostTensor out(Shape{v, c});
  for (size_t i = 0; i < ids.v.size(); ++i)
    for (int64_t j = 0; j < c; ++j)
      out.v[size_t(ids.v[i]) * size_t(c) + size_t(j)] += gy.v[i * size_t(c) + size_t(j)];
  return out;
}

TEST(EmbeddingKernels, BackwardSumsRepeatedIds) {
  CaseRng rng(51);
  const int64_t v = 37, c = 45;
  Tensor ids = make_ids(rng, Shape{40, 25}, v, DType::i32);  // ~27 repeats of each id
  Tensor gy = rng.tensor(Shape{40, 25, c}, DType::f32);
  Tensor gw = ops::embedding_backward(ids, gy, v);
  ASSERT_EQ(gw.shape(), (Shape{v, c}));
  // Sums of ~27 O(1) f32 terms: round-off ~27 * 6e-8 * 5, well inside 1e-5.
  CloseReport r = compare_close(
      gw, scatter_reference(HostTensor(ids), HostTensor(gy), v).to_tensor(), 1e-5, 1e-5);
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(EmbeddingKernels, BackwardIdenticalForAnyThreadCount) {
  CaseRng rng(52);
  const int64_t v = 101;
  Tensor ids = rng.ids(Shape{4000}, v, DType::i64);
  Tensor gy = rng.tensor(Shape{4000, 33}, DType::f32);
  const int saved_threads = num_threads();
  std::vector<Tensor> got;
  for (int t : {1, 2, 3}) {
    set_num_threads(t);
    got.push_back(ops::embedding_backward(ids, gy, v));
  }
  set_num_threads(saved_threads);
  EXPECT_TRUE(equal(got[1], got[0]));
  EXPECT_TRUE(equal(got[2], got[0]));
}

// 1000 gradients of 1.0 into one bf16 row: summed in bf16 the total would stop at 256 (where
// the bf16 spacing becomes 2, so 256 + 1 rounds back to 256); summed in f32 it is 1000, which
// bf16 holds exactly.
TEST(EmbeddingKernels, Bf16GradientsAccumulateInF32) {
  Tensor ids = zeros(Shape{1000}, DType::i64);
  Tensor gy = ones(Shape{1000, 3}, DType::bf16);
  Tensor gw = ops::embedding_backward(ids, gy, 2);
  EXPECT_EQ(to_vector<float>(gw), (std::vector<float>{1000, 1000, 1000, 0, 0, 0}));
}

TEST(EmbeddingKernels, GradientFlowsToTheWeightOnly) {
  CaseRng rng(53);
  Tensor w = rng.tensor(Shape{5, 4}, DType::f32).set_requires_grad(true);
  Tensor ids = from_vector<int64_t>({3, 1, 3}, Shape{3});
  tessera::sum(tessera::embedding(w, ids)).backward();
  // Row 3 is used twice, row 1 once, the others never.
  std::vector<float> want{0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 2, 2, 0, 0, 0, 0};
  EXPECT_EQ(to_vector<float>(w.grad()), want);
}

}  // namespace
}  // namespace tessera::testing
