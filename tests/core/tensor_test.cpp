// Tensor handles, views and layout.

#include <gtest/gtest.h>

#include <cmath>

#include "tessera/tessera.h"

namespace tessera {
namespace {

Tensor iota(const Shape& s, DType dt = DType::f32) {
  return ops::reshape(arange(0, double(s.numel()), 1, dt), s);
}

TEST(Tensor, EmptyHasRequestedLayout) {
  Tensor t = empty({2, 3, 4});
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Strides{12, 4, 1}));
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.nbytes(), 96u);
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = iota({2, 3});
  Tensor tt = ops::transpose(t, 0, 1);
  EXPECT_EQ(tt.storage(), t.storage());
  EXPECT_FALSE(tt.is_contiguous());
  EXPECT_EQ(to_vector<float>(tt), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  ops::fill_(ops::select(t, 0, 1), 7.0f);
  EXPECT_EQ(to_vector<float>(tt), (std::vector<float>{0, 7, 1, 7, 2, 7}));
}

TEST(Tensor, ReshapeIsAViewWhenLayoutAllows) {
  Tensor t = iota({4, 6});
  Tensor v = ops::view(t, {2, 2, -1});
  EXPECT_EQ(v.shape(), (Shape{2, 2, 6}));
  EXPECT_EQ(v.storage(), t.storage());
  // A transposed tensor cannot be flattened without a copy.
  Tensor tt = ops::transpose(t, 0, 1);
  EXPECT_THROW(ops::view(tt, {24}), Error);
  Tensor r = ops::reshape(tt, {24});
  EXPECT_NE(r.storage(), t.storage());
  EXPECT_EQ(to_vector<float>(r)[1], 6.0f);
  // Splitting a dim of a non-contiguous tensor is still a view.
  Tensor s = ops::view(tt, {3, 2, 4});
  EXPECT_EQ(s.storage(), t.storage());
  EXPECT_EQ(to_vector<float>(s), to_vector<float>(ops::reshape(ops::contiguous(tt), {3, 2, 4})));
}

TEST(Tensor, SliceExpandSqueeze) {
  Tensor t = iota({3, 5});
  Tensor s = ops::slice(t, 1, 1, 5, 2);
  EXPECT_EQ(s.shape(), (Shape{3, 2}));
  EXPECT_EQ(to_vector<float>(s), (std::vector<float>{1, 3, 6, 8, 11, 13}));
  Tensor n = ops::slice(t, 0, -2, 100);
  EXPECT_EQ(n.shape(), (Shape{2, 5}));
  Tensor e = ops::expand(ops::unsqueeze(ops::select(t, 1, 0), 1), {3, 4});
  EXPECT_EQ(e.strides()[1], 0);
  EXPECT_EQ(to_vector<float>(e), (std::vector<float>{0, 0, 0, 0, 5, 5, 5, 5, 10, 10, 10, 10}));
  EXPECT_EQ(ops::squeeze(ops::unsqueeze(t, 0), 0).shape(), t.shape());
  EXPECT_THROW(ops::expand(t, {3, 4}), Error);
}

TEST(Tensor, CatAndSplitRoundTrip) {
  Tensor a = iota({2, 3}), b = ops::add(iota({2, 2}), 100.0);
  Tensor c = ops::cat({a, b}, 1);
  EXPECT_EQ(c.shape(), (Shape{2, 5}));
  auto parts = ops::split(c, std::vector<int64_t>{3, 2}, 1);
  EXPECT_TRUE(equal(ops::contiguous(parts[0]), a));
  EXPECT_TRUE(equal(ops::contiguous(parts[1]), b));
  EXPECT_EQ(ops::split(c, 2, 1).size(), 3u);
}

TEST(Tensor, CastsRoundTrip) {
  Tensor x = from_vector<float>({1.5f, -2.25f, 3.0f, 49152.0f}, {4});  // exact in bf16 and f16
  for (DType dt : {DType::f64, DType::bf16, DType::f16, DType::f32}) {
    Tensor back = ops::cast(ops::cast(x, dt), DType::f32);
    EXPECT_TRUE(equal(back, x)) << dtype_name(dt);
  }
  Tensor i = ops::cast(from_vector<float>({1.9f, -1.9f}, {2}), DType::i32);
  EXPECT_EQ(to_vector<int32_t>(i), (std::vector<int32_t>{1, -1}));
}

TEST(Tensor, HalfRoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10 in f16: ties go to the even mantissa (1).
  EXPECT_EQ(float(Half(1.0f + 0.00048828125f)), 1.0f);
  EXPECT_EQ(float(Half(1.0f + 3 * 0.00048828125f)), 1.0f + 4 * 0.00048828125f);
  EXPECT_EQ(float(BFloat16(1.0f + 1.0f / 256)), 1.0f);
  EXPECT_TRUE(std::isinf(float(Half(70000.0f))));
  EXPECT_EQ(float(Half(5.960464477539063e-08f)), 5.960464477539063e-08f);  // smallest subnormal
}

TEST(Tensor, PrintingShowsValuesAndType) {
  std::string s = iota({2, 2}).to_string();
  EXPECT_NE(s.find("[[0, 1],"), std::string::npos) << s;
  EXPECT_NE(s.find("f32[2, 2] on cpu"), std::string::npos) << s;
}

TEST(Tensor, ReleasedStorageThrowsOnAccess) {
  Tensor t = iota({4});
  Tensor v = ops::slice(t, 0, 1, 3);
  t.storage()->release();
  EXPECT_THROW(v.data_ptr(), Error);
  EXPECT_THROW(ops::add(v, 1.0), Error);
  try {
    ops::mul(v, v);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("freed"), std::string::npos) << e.what();
  }
}

TEST(Tensor, ItemReadsOneElement) {
  EXPECT_EQ(scalar_tensor(2.5).item<float>(), 2.5f);
  EXPECT_THROW(iota({2}).item<float>(), Error);
}

}  // namespace
}  // namespace tessera
